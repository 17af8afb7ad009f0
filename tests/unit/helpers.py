"""Small builders shared by the unit tests: a ClusterState driven only through `apply`."""

from __future__ import annotations

from typing import Any

from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.deps import parse_dependency
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState

T0 = 1000.0


def spec(queue: str = "normal", **kw: Any) -> JobSpec:
    if isinstance(kw.get("dependency"), str):
        kw["dependency"] = parse_dependency(kw["dependency"])
    return JobSpec(user=kw.pop("user", "alice"), queue=queue, **kw)


def new_state(
    queues: tuple[QueueRecord, ...] = (QueueRecord("normal"),),
    hosts: dict[str, tuple[int, int]] | None = None,
) -> ClusterState:
    """A state with `queues` and `hosts` ({name: (slots, memory_mb)}) already applied."""
    state = ClusterState()
    for q in queues:
        state.apply(ev.QueueCreated(T0, q))
    for name, (slots, mem) in (hosts or {}).items():
        state.apply(ev.HostRegistered(T0, name, slots, mem))
    return state


def submit(state: ClusterState, queue: str = "normal", **kw: Any) -> str:
    number = state.next_number
    state.apply(ev.JobSubmitted(T0, number, spec(queue, **kw)))
    return str(number)


def submit_array(state: ClusterState, text: str, queue: str = "normal", **kw: Any) -> int:
    parsed = parse_array_spec(text)
    number = state.next_number
    state.apply(
        ev.ArraySubmitted(T0, number, spec(queue, **kw), parsed.indices, parsed.max_concurrent)
    )
    return number
