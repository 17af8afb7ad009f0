"""The four extension points of a scheduling pass, as small protocols.

    order    which pending job is tried next (within one queue-priority level)
    filter   whether a host may ever run a job (static for the pass: online, queue hosts,
             select[]); free slots and memory are checked by the host pool itself
    score    which of the hosts that fit is best (lower key first): first-fit, pack, spread
    reserve  what to do when a job does not fit (EASY backfill: reserve the earliest start)

A plugin is a class with `name` and `kind` and the method of its kind, registered with
`@register` in its own module under xce/sched/plugins/ (xce/sched/plugins/__init__.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from xce.core.model import JobSpec, QueueRecord
from xce.sched.snapshot import HostView, PendingArray, PendingJob, Snapshot

if TYPE_CHECKING:
    from xce.sched.hostpool import HostPool
    from xce.sched.reservation import Reservation

Item = PendingJob | PendingArray


@dataclass(slots=True)
class OrderContext:
    """What order plugins may read. `running_slots` and `group_slots` include the jobs this
    pass has already placed (the pipeline updates them before asking for the next job)."""

    now: float
    queue: QueueRecord
    usage_hours: Mapping[str, float]  # user -> decayed core-hours, running jobs included
    groups: Mapping[str, str]  # user -> fairshare group
    running_slots: dict[str, int] = field(default_factory=dict)  # user -> slots in use
    group_slots: dict[str, int] = field(default_factory=dict)  # group -> slots in use
    snapshot: Snapshot | None = None  # the pass's view (multifactor reads its settings)

    def group_of(self, user: str) -> str:
        return self.groups.get(user, "default")


class OrderPlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]

    def order(self, items: Sequence[Item], ctx: OrderContext) -> Iterator[Item]:
        """Yield every item once; `items` come sorted by submission."""
        ...


class FilterPlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]

    def accepts(self, host: HostView, spec: JobSpec, queue: QueueRecord) -> bool:
        """Whether `host` may run `spec` at all (decided once per pass and job shape)."""
        ...


class ScorePlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]
    # True when the key depends on free slots/memory (it then changes as jobs are placed)
    dynamic: ClassVar[bool]
    # True when placing a job can make a host's key better (pack); False when only worse
    # (spread). Assumed True when a plugin does not say.
    improving: ClassVar[bool]

    def key(self, pool: HostPool, i: int) -> tuple:
        """Sort key of host number `i` in `pool`; the lowest key is chosen."""
        ...


class ReservePlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]

    def reserve(
        self, pool: HostPool, hosts: Sequence[int], spec: JobSpec, now: float
    ) -> Reservation | None:
        """A reservation for `spec`, which fits none of `hosts` now, or None."""
        ...
