"""The pass memo (xce/sched/passes/memo.py): what passes over the same hosts and queues share.

A filter's answers are kept only when the filter declares itself `fixed`; a filter that
reads free slots is asked again each pass (else a host refused while full would stay
refused). The controller's `SnapshotCache` drops the memo when a host is added, and a memo
filled for one plugin registry is not read by a pass with another.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from tests.unit.helpers import T0, new_state, spec
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState
from xce.sched import plugins
from xce.sched.incremental import SnapshotCache
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import HostView, PendingJob, snapshot_of


class RoomyHosts:
    """Accepts only hosts with at least 4 free slots: it reads free slots, so it must be
    asked every pass."""

    name: ClassVar[str] = "roomy"
    kind: ClassVar[str] = "filter"  # no `fixed`: asked every pass

    def refuses_any(self, spec: JobSpec, queue: QueueRecord) -> bool:
        return True

    def accepts(self, host: HostView, spec: JobSpec, queue: QueueRecord) -> bool:
        return host.free_slots >= 4


class FixedRoomyHosts(RoomyHosts):
    """The same filter wrongly declared `fixed`: its first answer is kept."""

    name: ClassVar[str] = "roomy-fixed"
    fixed: ClassVar[bool] = True


def state_with(filter_name: str) -> tuple[ClusterState, SnapshotCache]:
    state = new_state((QueueRecord("normal", plugins=(filter_name,)),), {"h1": (8, 64_000)})
    cache = SnapshotCache()
    cache.snapshot(state)
    return state, cache


def apply(state: ClusterState, cache: SnapshotCache, event: ev.Event) -> None:
    state.apply(event)
    cache.observe(event, state)


def passes(filter_name: str) -> list[list[str]]:
    """Three passes: a 5-slot job starts (8 free), then with 3 free a 1-slot job may not
    (the filter wants 4 free), then after the first ends it may."""
    registry = plugins.PluginRegistry([*plugins.builtin_plugins(), RoomyHosts, FixedRoomyHosts])
    state, cache = state_with(filter_name)
    placed: list[list[str]] = []

    def one_pass() -> None:
        snapshot = cache.snapshot(state)
        decided = plan(snapshot, T0, registry=registry)
        assert decided.placements == plan(snapshot_of(state), T0, registry=registry).placements
        placed.append([p.job_id for p in decided.placements])
        for p in decided.placements:
            apply(state, cache, ev.JobStarted(T0, p.job_id, p.host))

    apply(state, cache, ev.JobSubmitted(T0, 1, spec("normal", slots=5)))
    one_pass()
    apply(state, cache, ev.JobSubmitted(T0, 2, spec("normal", slots=1)))
    one_pass()
    apply(state, cache, ev.JobFinished(T0, "1", 0, 0))
    one_pass()
    return placed


def test_a_filter_that_reads_free_slots_is_asked_every_pass() -> None:
    assert passes("roomy") == [["1"], [], ["2"]]


def test_a_fixed_filter_is_asked_once_the_guard_can_fail() -> None:
    """Declared fixed, the filter's first answer (h1 refused while 3 slots were free) is
    kept: the comparison with a fresh snapshot in `passes` then fails. So the memo is
    read, and the `fixed` flag is what keeps it right."""
    try:
        passes("roomy-fixed")
    except AssertionError:
        return
    raise AssertionError("the memo kept no filter answer")


def test_the_cache_drops_the_memo_when_a_host_comes() -> None:
    state = new_state((QueueRecord("normal"),), {"h1": (8, 64_000)})
    cache = SnapshotCache()
    first = cache.snapshot(state).memo
    apply(state, cache, ev.JobSubmitted(T0, 1, spec("normal", slots=1)))
    assert cache.snapshot(state).memo is first  # a job changes no host or queue
    apply(state, cache, ev.HostRegistered(T0, "h2", 8, 64_000))
    assert cache.snapshot(state).memo is not first
    assert snapshot_of(state).memo is None


def test_a_memo_serves_one_registry() -> None:
    state = new_state((QueueRecord("normal"),), {"h1": (8, 64_000)})
    cache = SnapshotCache()
    snapshot = cache.snapshot(state)
    plan(snapshot, T0)
    assert snapshot.memo is not None and snapshot.memo.registry is plugins.builtin()
    other = plugins.PluginRegistry(plugins.builtin_plugins())
    assert not snapshot.memo.claim(other)
    plan(snapshot, T0, registry=other)  # runs without the memo
    assert snapshot.memo.registry is plugins.builtin()


def test_shapes_kept_in_the_memo_answer_as_a_fresh_pass() -> None:
    """What a pass finds for a shape from the hosts' fixed parts (too big, too few devices
    at all, the static ranking) is kept for later passes; the reasons that then depend on
    free resources (devices held now, an EASY reservation) are still found right when the
    candidates came from the memo. Every pass is compared with a fresh snapshot's."""
    state = ClusterState()
    state.apply(ev.QueueCreated(T0, QueueRecord("normal", plugins=("backfill",))))
    state.apply(ev.HostRegistered(T0, "h1", 8, 64_000, gres=(("gpu", "0,1"),)))
    state.apply(ev.HostRegistered(T0, "h2", 4, 64_000))
    cache = SnapshotCache()
    cache.snapshot(state)

    def one_pass() -> list[str]:
        snapshot = cache.snapshot(state)
        decided = plan(snapshot, T0)
        fresh = plan(snapshot_of(state), T0)
        assert decided.placements == fresh.placements
        assert decided.texts() == fresh.texts()
        assert decided.reservations == fresh.reservations
        for p in decided.placements:
            apply(state, cache, ev.JobStarted(T0, p.job_id, p.host, devices=p.devices))
        return [p.job_id for p in decided.placements]

    def submit(number: int, **kw: object) -> None:
        apply(state, cache, ev.JobSubmitted(T0, number, spec("normal", walltime_s=600, **kw)))

    submit(1, slots=1, gres=(("gpu", "2"),))  # both GPUs of h1
    assert one_pass() == ["1"]
    memo = cache.snapshot(state).memo
    assert memo is not None and memo.shapes  # the memo is filled...
    submit(2, slots=1, gres=(("gpu", "2"),))  # the same shape, first in its pass: waits
    submit(3, slots=8)  # for h1's GPUs (read from the memo); for room, behind
    submit(4, slots=4)
    submit(5, slots=16)  # too big for any host
    submit(6, slots=1, gres=(("gpu", "4"),))  # more GPUs than any host has
    assert one_pass() == ["4"]
    asked = len(memo.shapes)
    submit(7, slots=16)
    submit(8, slots=8)
    assert one_pass() == []  # ...and read: every shape was asked before
    assert len(memo.shapes) == asked
    assert cache.snapshot(state).memo is memo


def test_the_shapes_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that runs for months meets many shapes between host changes: the
    memo keeps `SHAPES_KEPT` and then starts over, still answering as a fresh pass."""
    from xce.sched.passes import hosts as pass_hosts

    monkeypatch.setattr(pass_hosts, "SHAPES_KEPT", 3)
    state = new_state((QueueRecord("normal"),), {"h1": (8, 64_000)})
    cache = SnapshotCache()
    for number in range(1, 9):
        apply(state, cache, ev.JobSubmitted(T0, number, spec("normal", slots=number)))
        snapshot = cache.snapshot(state)
        decided = plan(snapshot, T0)
        assert decided.texts() == plan(snapshot_of(state), T0).texts()
        assert snapshot.memo is not None and 0 < len(snapshot.memo.shapes) <= 3


def test_the_groups_kept_are_those_of_the_queued_mapping_handed() -> None:
    """A pass keeps its groups in the memo for the next pass handed the *same* `queued`
    mapping (the simulator's); a pass handed another one (the controller makes one per
    snapshot, here of another queue) orders that one, not the kept groups."""
    state = new_state(
        (QueueRecord("a", plugins=("fcfs",)), QueueRecord("b", plugins=("first-fit",))),
        {"h1": (8, 64_000)},
    )
    cache = SnapshotCache()
    placed: list[list[str]] = []
    apply(state, cache, ev.JobSubmitted(T0, 1, spec("a")))
    for number, queue in ((2, "b"), (3, "a")):
        snapshot = cache.snapshot(state)
        assert snapshot.memo is not None and snapshot.queued is not None
        decided = plan(snapshot, T0, explain=False)
        if placed:  # the memo kept the last pass's groups, for its mapping only
            assert snapshot.memo.groups is not None
            assert snapshot.memo.groups[0] is snapshot.queued
        placed.append([p.job_id for p in decided.placements])
        for p in decided.placements:
            apply(state, cache, ev.JobStarted(T0, p.job_id, p.host))
        apply(state, cache, ev.JobSubmitted(T0, number, spec(queue)))
    assert placed == [["1"], ["2"]]
    # the same mapping handed again (as the simulator does) reuses the kept groups
    snapshot = cache.snapshot(state)
    assert snapshot.memo is not None
    first = plan(snapshot, T0, explain=False)
    kept = snapshot.memo.groups
    assert kept is not None and kept[0] is snapshot.queued
    assert [p.job_id for p in first.placements] == ["3"]


def test_a_queued_mapping_changed_in_place_is_grouped_again() -> None:
    """The same mapping object whose queue or collection was replaced in place is not
    answered from the kept groups (from the review: the old groups placed job 1 again)."""
    state = new_state(
        (QueueRecord("a", plugins=("fcfs",)), QueueRecord("b", plugins=("fcfs",))),
        {"h1": (8, 64_000)},
    )
    cache = SnapshotCache()
    apply(state, cache, ev.JobSubmitted(T0, 1, spec("a")))
    apply(state, cache, ev.JobSubmitted(T0, 2, spec("b")))
    snapshot = cache.snapshot(state)
    assert snapshot.queued is not None
    first, second = list(snapshot.queued["a"]), list(snapshot.queued["b"])
    queued: dict[str, list[PendingJob]] = {"a": first}
    mine = dataclasses.replace(snapshot, queued=queued)
    assert [p.job_id for p in plan(mine, T0, explain=False).placements] == ["1"]
    queued.clear()
    queued["b"] = second
    assert [p.job_id for p in plan(mine, T0, explain=False).placements] == ["2"]
    queued["b"] = list(first)  # the same key, another collection
    assert [p.job_id for p in plan(mine, T0, explain=False).placements] == ["1"]
