"""`Applier` (xce/core/applier.py): observers are fed in order around each apply, a refused
event reaches no `after` hook, and the service and recovery feed the observers they are
handed exactly as they fed the accounting feed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.helpers import T0, new_state, spec
from xce.config.settings import ControllerSettings
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.applier import Applier, Observer
from xce.core.errors import NotFound, XceError
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.recovery import recover


class Recorder:
    """An observer that writes down what it is told (with what the state held then)."""

    def __init__(self, name: str, calls: list[tuple[object, ...]]) -> None:
        self.name = name
        self.calls = calls

    def before(self, state: ClusterState, event: ev.Event) -> None:
        self.calls.append((self.name, "before", type(event).__name__, state.applied))

    def after(self, state: ClusterState, event: ev.Event, seq: int) -> None:
        self.calls.append((self.name, "after", type(event).__name__, state.applied, seq))

    def durable(self, seq: int) -> None:
        self.calls.append((self.name, "durable", seq))

    def recovered(self, state: ClusterState, checkpoint_seq: int, last_seq: int) -> None:
        self.calls.append((self.name, "recovered", checkpoint_seq, last_seq, len(state.jobs)))


def test_observers_are_fed_in_order_around_the_apply() -> None:
    calls: list[tuple[object, ...]] = []
    a, b = Recorder("a", calls), Recorder("b", calls)
    observers: tuple[Observer, ...] = (a, b)
    state = new_state()
    applier = Applier(state, observers)
    applier.apply(ev.JobSubmitted(T0, 1, spec()), 2)
    applier.durable(2)
    assert calls == [
        ("a", "before", "JobSubmitted", 1),
        ("b", "before", "JobSubmitted", 1),
        ("a", "after", "JobSubmitted", 2, 2),
        ("b", "after", "JobSubmitted", 2, 2),
        ("a", "durable", 2),
        ("b", "durable", 2),
    ]
    calls.clear()
    applier.begin(ev.QueueClosed(T0, "normal"))
    assert calls == [("a", "before", "QueueClosed", 2), ("b", "before", "QueueClosed", 2)]
    applier.finish(ev.QueueClosed(T0, "normal"), 3)
    assert calls[2:] == [("a", "after", "QueueClosed", 3, 3), ("b", "after", "QueueClosed", 3, 3)]


def test_a_refused_event_reaches_no_after_hook() -> None:
    calls: list[tuple[object, ...]] = []
    applier = Applier(new_state(), [Recorder("a", calls)])
    with pytest.raises(NotFound):
        applier.apply(ev.QueueClosed(T0, "nosuch"), 2)
    assert calls == [("a", "before", "QueueClosed", 1)]


def test_a_before_hook_that_raises_stops_the_apply() -> None:
    class Refuses(Recorder):
        def before(self, state: ClusterState, event: ev.Event) -> None:
            raise XceError("no")

    calls: list[tuple[object, ...]] = []
    state = new_state()
    applier = Applier(state, (Refuses("r", calls), Recorder("a", calls)))
    with pytest.raises(XceError):
        applier.apply(ev.JobSubmitted(T0, 1, spec()), 2)
    assert not state.jobs and calls == []


def test_no_observers_applies_alone() -> None:
    state = ClusterState()
    applier = Applier(state)
    assert applier.observers == ()
    applier.apply(ev.QueueCreated(T0, QueueRecord("normal")), 1)
    applier.durable(1)
    applier.recovered(0, 1)
    assert "normal" in state.queues and state.applied == 1


async def test_service_and_recovery_feed_the_observers_they_are_handed(tmp_path: Path) -> None:
    calls: list[tuple[object, ...]] = []
    settings = StoreSettings(segment_bytes=64 * 1024, observers=(Recorder("r", calls),))
    store = DurableLog.open(tmp_path, settings)
    assert calls == [("r", "recovered", 0, 0, 0)]
    calls.clear()
    service = ControllerService(
        ControllerSettings(state_dir=tmp_path),
        FileStore(tmp_path / "files", 1 << 20),
        state=store.recovered.state,
        log=store,
        observers=(Recorder("s", calls),),
    )
    await service.commit([ev.QueueCreated(0, QueueRecord("normal")), ev.JobSubmitted(0, 1, spec())])
    assert calls == [
        ("s", "before", "QueueCreated", 0),
        ("s", "after", "QueueCreated", 1, 1),
        ("s", "before", "JobSubmitted", 1),
        ("s", "after", "JobSubmitted", 2, 2),
        ("s", "durable", 2),
    ]
    await store.writer.close()
    calls.clear()
    recovered = recover(tmp_path, observers=[Recorder("r", calls)])
    assert recovered.state.applied == 2
    assert calls == [
        ("r", "before", "QueueCreated", 0),
        ("r", "after", "QueueCreated", 1, 1),
        ("r", "before", "JobSubmitted", 1),
        ("r", "after", "JobSubmitted", 2, 2),
        ("r", "recovered", 0, 2, 1),
    ]


def test_the_service_accounting_feed_is_one_of_its_observers(tmp_path: Path) -> None:
    calls: list[tuple[object, ...]] = []
    first, other = Recorder("first", calls), Recorder("other", calls)
    service = ControllerService(
        ControllerSettings(state_dir=tmp_path),
        FileStore(tmp_path / "files", 1 << 20),
        observers=(other,),
    )
    assert service.accounting is None and service.applier.observers == (other,)
    service.accounting = first  # type: ignore[assignment]
    assert service.applier.observers == (other, first)
    second = Recorder("second", calls)
    service.accounting = second  # type: ignore[assignment]
    assert service.accounting is second and service.applier.observers == (other, second)
    service.accounting = None
    assert service.applier.observers == (other,)
