"""EASY backfill: the blocked head job gets a reservation that later jobs never delay.

Hand-computed: host h has 4 slots; R (3 slots, walltime 100) started at T0, so h frees 3
slots at T0+100. At T0+10 the head job A (4 slots) fits nowhere: it is reserved on h from
T0+100 with nothing to spare.
"""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import snapshot_of
from xce.sched.types import Plan

NOW = T0 + 10


def cluster(plugins: tuple[str, ...], hosts: dict[str, tuple[int, int]]) -> ClusterState:
    state = new_state(queues=(QueueRecord("normal", plugins=plugins),), hosts=hosts)
    running = submit(state, slots=3, walltime_s=100)
    state.apply(ev.JobStarted(T0, running, "h"))
    return state


def run(state: ClusterState) -> Plan:
    return plan(snapshot_of(state), NOW)


def test_short_job_backfills_long_job_waits() -> None:
    state = cluster(("backfill",), {"h": (4, 1000)})
    head = submit(state, slots=4, walltime_s=50)
    long = submit(state, slots=1, walltime_s=200)  # would end at T0+210 > T0+100
    short = submit(state, slots=1, walltime_s=50)  # ends at T0+60 <= T0+100
    later = submit(state, slots=1, walltime_s=30)  # fits by time, but h is full again
    result = run(state)
    assert [(p.job_id, p.host) for p in result.placements] == [(short, "h")]
    assert result.reservations == [{"job_id": head, "host": "h", "start": T0 + 100}]
    assert result.texts()[head] == "waiting for free slots or memory (host h reserved from 1100)"
    assert long in result.reasons and later in result.reasons


def test_without_backfill_the_long_job_jumps_ahead() -> None:
    state = cluster((), {"h": (4, 1000)})
    submit(state, slots=4, walltime_s=50)
    long = submit(state, slots=1, walltime_s=200)
    result = run(state)
    assert [p.job_id for p in result.placements] == [long]
    assert result.reservations == []


def test_job_without_walltime_cannot_backfill_on_the_reserved_host() -> None:
    state = cluster(("backfill",), {"h": (4, 1000)})
    submit(state, slots=4, walltime_s=50)
    endless = submit(state, slots=1)
    assert run(state).placements == []
    assert endless in run(state).reasons


def test_leftover_at_reserved_start_may_be_used_by_long_jobs() -> None:
    # h has 6 slots: at T0+100 it will have 6 free, the head needs 4, 2 are spare; 3 are
    # free now. Two long 1-slot jobs fit in the spare, the third would delay the head.
    state = cluster(("backfill",), {"h": (6, 1000)})
    head = submit(state, slots=4, walltime_s=50)
    longs = [submit(state, slots=1, walltime_s=500) for _ in range(3)]
    result = run(state)
    assert [p.job_id for p in result.placements] == longs[:2]
    assert result.reservations[0]["job_id"] == head


def test_reservation_goes_to_the_host_that_frees_first_others_stay_usable() -> None:
    # h frees at T0+100; g (4 slots) has a 4-slot job until T0+300. The head goes to h;
    # a long job may still use g once g is free... but it is not, so it waits; a host
    # k with room takes long jobs freely.
    state = cluster(("backfill",), {"h": (4, 1000), "g": (4, 1000), "k": (1, 1000)})
    busy = submit(state, slots=4, walltime_s=300)
    state.apply(ev.JobStarted(T0, busy, "g"))
    head = submit(state, slots=4, walltime_s=50)
    long = submit(state, slots=1, walltime_s=10_000)
    result = run(state)
    assert result.reservations == [{"job_id": head, "host": "h", "start": T0 + 100}]
    assert [(p.job_id, p.host) for p in result.placements] == [(long, "k")]


def test_only_the_first_blocked_job_is_reserved() -> None:
    state = cluster(("backfill",), {"h": (4, 1000)})
    first = submit(state, slots=4, walltime_s=50)
    submit(state, slots=3, walltime_s=50)
    assert [r["job_id"] for r in run(state).reservations] == [first]


def test_no_reservation_when_running_jobs_have_no_walltime() -> None:
    state = new_state(
        queues=(QueueRecord("normal", plugins=("backfill",)),), hosts={"h": (4, 1000)}
    )
    forever = submit(state, slots=3)
    state.apply(ev.JobStarted(T0, forever, "h"))
    submit(state, slots=4, walltime_s=50)
    long = submit(state, slots=1, walltime_s=500)
    result = run(state)
    assert result.reservations == []
    assert [p.job_id for p in result.placements] == [long]
