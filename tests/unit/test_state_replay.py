"""ClusterState under random event sequences: replay is deterministic, a refused event changes
nothing, and the derived indexes (host load, pending, array counters) match the records."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.helpers import T0, new_state, spec, submit, submit_array
from xce.core import events as ev
from xce.core.arrayspec import IndexSet, parse_array_spec
from xce.core.deps import Outcome, parse_dependency
from xce.core.errors import Conflict, XceError
from xce.core.model import HostFailurePolicy, HostLoad, JobSpec, JobState, QueueRecord, Usage
from xce.core.state import ClusterState

# Placeholders filled in when the event is built from the state it is applied to, so that
# most events name something that exists; the built events are what replay uses.
NEXT = -1  # the next job number
CURRENT = -1  # the job's current attempt
KNOWN = "@"  # prefix: "@k" is the k-th existing job or task (k modulo how many exist)
PURGEABLE = "*"  # JobsPurged of every finished job and array the state would purge now

NUMBERS = st.integers(1, 5)
KNOWN_IDS = st.integers(0, 20).map(lambda k: f"{KNOWN}{k}")
# raw ids (often missing, sometimes array numbers) and, more often, ids that exist
JOB_IDS = st.one_of(
    NUMBERS.map(str),
    st.builds(lambda n, i: f"{n}[{i}]", NUMBERS, st.integers(0, 5)),
    KNOWN_IDS,
    KNOWN_IDS,
    KNOWN_IDS,
)
HOSTS = st.sampled_from(["h1", "h2", "h3"])
QUEUES = st.sampled_from(["normal", "normal", "normal", "low", "nosuch"])
ARRAY_SPECS = st.sampled_from(["0-3", "1,3,5", "0-5:2%2", "1-4%1", "2", "0-5%3"])

SPECS = st.builds(
    JobSpec,
    user=st.just("alice"),
    queue=QUEUES,
    slots=st.integers(1, 3),
    memory_mb=st.sampled_from([0, 100, 300]),
    hold=st.sampled_from([False, False, False, True]),
    dependency=st.sampled_from(
        [(), parse_dependency("afterok:1"), parse_dependency("afterany:2[1]")]
    ),
)

SUBMISSIONS: st.SearchStrategy[Any] = st.one_of(
    st.builds(
        lambda n, s: ev.JobSubmitted(0, n, s), st.sampled_from([NEXT, NEXT, NEXT, 1, 4]), SPECS
    ),
    st.builds(
        lambda n, s, text, empty: ev.ArraySubmitted(
            0,
            n,
            s,
            IndexSet() if empty else parse_array_spec(text).indices,
            parse_array_spec(text).max_concurrent,
        ),
        st.sampled_from([NEXT, NEXT, 2]),
        SPECS,
        ARRAY_SPECS,
        st.sampled_from([False, False, False, True]),
    ),
)

EVENTS: st.SearchStrategy[Any] = st.one_of(
    SUBMISSIONS,
    st.builds(lambda j, h: ev.JobStarted(0, j, h), JOB_IDS, HOSTS),
    st.builds(lambda j, h: ev.JobStarted(0, j, h), KNOWN_IDS, st.sampled_from(["h1", "h2"])),
    st.builds(lambda j, h: ev.JobStarted(0, j, h), KNOWN_IDS, st.sampled_from(["h1", "h2"])),
    st.builds(lambda j, b: ev.JobSuspended(0, j, b), JOB_IDS, st.booleans()),
    st.builds(lambda j: ev.JobResumed(0, j), JOB_IDS),
    st.builds(lambda j: ev.JobKillRequested(0, j), JOB_IDS),
    st.builds(lambda j: ev.JobKilled(0, j), JOB_IDS),
    st.builds(lambda j: ev.JobRequeued(0, j), JOB_IDS),
    st.builds(lambda j, r: ev.JobHostLost(0, j, r), JOB_IDS, st.booleans()),
    st.builds(
        lambda j, a, c, sig: ev.JobFinished(0, j, a, c, sig),
        JOB_IDS,
        st.sampled_from([CURRENT, CURRENT, CURRENT, 0, 1]),
        st.sampled_from([0, 0, 1, None]),
        st.sampled_from([None, None, 9]),
    ),
    st.builds(lambda j: ev.JobFinished(0, j, CURRENT, 0), KNOWN_IDS),
    st.builds(lambda j: ev.JobRequeued(0, j), KNOWN_IDS),
    st.builds(
        lambda j, a: ev.JobUsageReported(0, j, a, Usage(cpu_user_s=1.0)),
        JOB_IDS,
        st.sampled_from([CURRENT, 0, 1]),
    ),
    st.builds(
        lambda kind, n: kind(0, n),
        st.sampled_from([ev.ArrayHeld, ev.ArrayReleased, ev.ArrayCancelled]),
        NUMBERS,
    ),
    st.builds(
        lambda kind, n: kind(0, n),
        st.sampled_from([ev.ArrayHeld, ev.ArrayReleased, ev.ArrayCancelled]),
        NUMBERS,
    ),
    st.builds(
        lambda name, prio, policy: ev.QueueCreated(
            0, QueueRecord(name, prio, on_host_failure=policy)
        ),
        QUEUES,
        st.integers(-5, 5),
        st.sampled_from(list(HostFailurePolicy)),
    ),
    st.builds(
        lambda kind, name: kind(0, name),
        st.sampled_from([ev.QueueOpened, ev.QueueClosed, ev.QueueActivated, ev.QueueDeactivated]),
        QUEUES,
    ),
    # retention: everything purgeable now ("*", resolved), or raw ids (often refused)
    st.builds(
        lambda ids: ev.JobsPurged(0, ids),
        st.sampled_from([(PURGEABLE,), (PURGEABLE,), ("1",), ("2", "3"), ("1", "1"), ("2[1]",)]),
    ),
    # Reservations: `first` and `last` are offsets, resolved against the state (resolve).
    st.builds(
        lambda skip, size: ev.JobNumbersReserved(0, skip, size),
        st.integers(0, 3),
        st.integers(-1, 4),
    ),
    st.builds(
        lambda n, s, m: ev.HostRegistered(0, n, s, m),
        HOSTS,
        st.integers(1, 8),
        st.sampled_from([200, 1000]),
    ),
    st.builds(
        lambda kind, name: kind(0, name),
        st.sampled_from(
            [
                ev.HostOpened,
                ev.HostClosed,
                ev.HostDrainStarted,
                ev.HostUnavailable,
                ev.HostAvailable,
            ]
        ),
        HOSTS,
    ),
)

PRELUDE = [
    ev.QueueCreated(0, QueueRecord("normal")),
    ev.HostRegistered(0, "h1", 4, 1000),
    ev.HostRegistered(0, "h2", 2, 200),
]


def resolve(template: Any, state: ClusterState, at: float) -> Any:
    """Fill in the time and, for submissions, the next number (so many of them succeed)."""
    changes: dict[str, Any] = {"at": at}
    if isinstance(template, ev.JobNumbersReserved):
        first = state.next_number + template.first
        changes.update(first=first, last=max(state.number_ceiling, first - 1) + template.last)
    if getattr(template, "number", None) == NEXT:
        changes["number"] = state.next_number
    job_id = getattr(template, "job_id", None)
    if job_id is not None and job_id.startswith(KNOWN):
        known = known_ids(state)
        if known:
            job_id = changes["job_id"] = known[int(job_id[1:]) % len(known)]
    if isinstance(template, ev.JobsPurged) and template.ids == (PURGEABLE,):
        changes["ids"] = tuple(state.purgeable(float("inf")))
    if getattr(template, "attempt", None) == CURRENT:
        job = state.jobs.get(job_id or "")
        changes["attempt"] = job.attempt if job else 0
    return dataclasses.replace(template, **changes)


def known_ids(state: ClusterState) -> list[str]:
    """Materialised jobs, plus a few not-started tasks of each array (pending or cancelled)."""
    ids = list(state.jobs)
    for number, array in state.arrays.items():
        unstarted = [i for i in array.indices if f"{number}[{i}]" not in state.jobs]
        ids.extend(f"{number}[{i}]" for i in unstarted[:3])
    return ids


def snapshot(state: ClusterState) -> dict[str, Any]:
    return {
        "jobs": dict(state.jobs),
        "arrays": dict(state.arrays),
        "queues": dict(state.queues),
        "hosts": dict(state.hosts),
        "host_load": dict(state.host_load),
        "pending": list(state.pending),
        "pending_arrays": list(state.pending_arrays),
        "array_tasks": {k: list(v) for k, v in state.array_tasks.items()},
        "next_number": state.next_number,
        "number_ceiling": state.number_ceiling,
        "submit_keys": dict(state.submit_keys),
        "applied": state.applied,
    }


def check_invariants(state: ClusterState) -> None:
    # host load is exactly what the active jobs on each host hold
    expected: dict[str, HostLoad] = {}
    for job in state.jobs.values():
        if job.state.active:
            assert job.host is not None, job
            load = expected.get(job.host, HostLoad())
            expected[job.host] = HostLoad(
                load.slots + job.spec.slots,
                load.memory_mb + job.spec.memory_mb,
                load.jobs | {job.id},
            )
        else:
            assert job.state is not JobState.PEND or job.host is None, job
    for host in set(expected) | set(state.host_load):
        assert state.host_load.get(host, HostLoad()) == expected.get(host, HostLoad()), host

    # pending holds exactly the PEND materialised jobs
    assert set(state.pending) == {j.id for j in state.jobs.values() if j.state is JobState.PEND}

    # every materialised task is listed under its array, and nothing else is
    tasks = {j.id for j in state.jobs.values() if j.array_index is not None}
    assert tasks == {i for ids in state.array_tasks.values() for i in ids}

    for number, array in state.arrays.items():
        mine = [state.jobs[i] for i in state.array_tasks.get(number, ())]
        assert all(t.number == number and t.array_index in array.indices for t in mine)
        started = {t.array_index for t in mine}
        assert not any(i in array.pending for i in started)
        assert all(i in array.indices for i in array.pending)
        # indices neither pending nor materialised were cancelled before they started
        cancelled = len(array.indices) - len(array.pending) - len(started)
        assert array.active == sum(t.state.active for t in mine), array
        assert array.done == sum(t.state is JobState.DONE for t in mine), array
        assert array.exited == sum(t.state is JobState.EXIT for t in mine) + cancelled, array
        assert (number in state.pending_arrays) == bool(array.pending)
    assert set(state.pending_arrays) <= set(state.arrays)

    numbers = {j.number for j in state.jobs.values()} | set(state.arrays)
    assert all(n < state.next_number for n in numbers)


def run(templates: list[Any], check: bool) -> tuple[ClusterState, list[tuple[Any, bool]]]:
    """Apply the templates; returns the state and each event with whether it was accepted."""
    state = ClusterState()
    applied: list[tuple[Any, bool]] = []
    for i, template in enumerate(PRELUDE + templates):
        event = resolve(template, state, T0 + i)
        before = snapshot(state) if check else None
        array_before = state.arrays.get(getattr(event, "number", None))
        try:
            state.apply(event)
        except XceError:
            applied.append((event, False))
            if check:
                assert snapshot(state) == before, f"refused {event} changed the state"
        else:
            applied.append((event, True))
            if check and isinstance(event, ev.ArrayCancelled):
                after = state.arrays[event.number]
                assert array_before is not None
                assert after.exited == array_before.exited + len(array_before.pending)
                assert not after.pending
        if check:
            check_invariants(state)
    return state, applied


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


HISTORIES = st.builds(
    lambda first, rest: first + rest,
    st.lists(SUBMISSIONS, min_size=1, max_size=6),
    st.lists(EVENTS, min_size=10, max_size=60),
)


@SETTINGS
@given(HISTORIES)
def test_replay_gives_an_equal_state(templates: list[Any]) -> None:
    first, events = run(templates, check=False)
    second = ClusterState()
    for event, accepted in events:
        try:
            second.apply(event)
        except XceError:
            assert not accepted, f"{event} was accepted the first time"
        else:
            assert accepted, f"{event} was refused the first time"
    assert snapshot(second) == snapshot(first)


@SETTINGS
@given(HISTORIES)
def test_refused_events_change_nothing_and_indexes_stay_consistent(templates: list[Any]) -> None:
    run(templates, check=True)


def test_invariants_hold_on_a_mixed_array_history() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    number = submit_array(state, "0-3%2")
    state.apply(ev.JobStarted(T0, f"{number}[0]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[0]", 0, 0))
    state.apply(ev.JobStarted(T0, f"{number}[1]", "h1"))
    state.apply(ev.JobKilled(T0, f"{number}[2]"))
    check_invariants(state)
    assert (state.arrays[number].done, state.arrays[number].active) == (1, 1)
    state.apply(ev.ArrayCancelled(T0, number))
    check_invariants(state)
    assert state.arrays[number].exited == 2  # task 2 killed, task 3 cancelled
    assert not state.arrays[number].finished


# --- deterministic checks of the array bookkeeping the properties rely on ----------------


def test_array_submit_materialises_nothing() -> None:
    state = new_state()
    number = submit_array(state, "1-1000000")
    assert state.jobs == {}
    assert list(state.pending_arrays) == [number]
    assert state.arrays[number].total == 1_000_000
    assert state.job(f"{number}[500000]").state is JobState.PEND


def test_empty_array_is_refused() -> None:
    state = new_state()
    with pytest.raises(XceError, match="at least one index"):
        state.apply(ev.ArraySubmitted(T0, 1, spec(), IndexSet()))
    assert state.next_number == 1


def test_starting_tasks_moves_them_out_of_pending() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-3", slots=2)
    state.apply(ev.JobStarted(T0, f"{number}[2]", "h1"))
    array = state.arrays[number]
    assert list(array.pending) == [1, 3]
    assert array.active == 1
    assert state.host_load["h1"].slots == 2
    assert state.tasks_of(number)[0].id == f"{number}[2]"
    state.apply(ev.JobStarted(T0, f"{number}[1]", "h1"))
    state.apply(ev.JobStarted(T0, f"{number}[3]", "h1"))
    assert number not in state.pending_arrays
    for i in (1, 2):
        state.apply(ev.JobFinished(T0, f"{number}[{i}]", 0, 0))
    state.apply(ev.JobFinished(T0, f"{number}[3]", 0, 1))
    array = state.arrays[number]
    assert (array.active, array.done, array.exited, array.finished) == (0, 2, 1, True)
    check_invariants(state)


def test_array_cancel_counts_pending_tasks_as_exited() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-10")
    state.apply(ev.JobStarted(T0, f"{number}[1]", "h1"))
    state.apply(ev.ArrayCancelled(T0 + 1, number))
    array = state.arrays[number]
    assert (array.active, array.exited, len(array.pending)) == (1, 9, 0)
    assert number not in state.pending_arrays
    assert state.job(f"{number}[5]").state is JobState.EXIT
    assert state.job(f"{number}[5]").reason == "killed before it started"
    assert state.job(f"{number}[1]").state is JobState.RUN
    check_invariants(state)


def test_held_array_tasks_are_psusp_until_released() -> None:
    state = new_state()
    number = submit_array(state, "1-3")
    state.apply(ev.ArrayHeld(T0, number))
    assert state.job(f"{number}[2]").state is JobState.PSUSP
    state.apply(ev.ArrayReleased(T0, number))
    assert state.job(f"{number}[2]").state is JobState.PEND


def test_replay_of_a_fixed_history_matches() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    submit(state, slots=2)
    submit_array(state, "0-4%2")
    history = [
        ev.JobStarted(T0 + 1, "1", "h1"),
        ev.JobStarted(T0 + 2, "2[0]", "h1"),
        ev.JobSuspended(T0 + 3, "1"),
        ev.JobRequeued(T0 + 4, "2[0]"),
        ev.ArrayCancelled(T0 + 5, 2),
    ]
    for event in history:
        state.apply(event)
    replayed = new_state(hosts={"h1": (4, 1000)})
    submit(replayed, slots=2)
    submit_array(replayed, "0-4%2")
    for event in history:
        replayed.apply(event)
    assert snapshot(replayed) == snapshot(state)
    check_invariants(state)


# --- BUGS in xce/core/state.py: these tests fail until the code is fixed -----------------


def test_requeue_of_a_task_killed_before_it_started_is_refused() -> None:
    """A cancelled task never ran: requeueing it is a Conflict and the counters stay right."""
    state = new_state()
    number = submit_array(state, "1-2")
    state.apply(ev.ArrayCancelled(T0, number))
    before = snapshot(state)
    with pytest.raises(Conflict, match="killed before it started"):
        state.apply(ev.JobRequeued(T0 + 1, f"{number}[1]"))
    assert snapshot(state) == before
    array = state.arrays[number]
    assert array.exited == 2 and array.finished
    assert state.outcome(str(number)) is Outcome.FAILED


def test_non_canonical_job_id_keeps_indexes_right() -> None:
    """`job()` accepts `01` for job 1; changes through such an id must update the indexes of
    the stored record (a regression test for `_materialise`)."""
    state = new_state(hosts={"h1": (4, 1000)})
    pend = submit(state)
    run_ = submit(state, slots=3)
    state.apply(ev.JobStarted(T0, run_, "h1"))
    state.apply(ev.JobKilled(T0 + 1, f"0{pend}"))
    state.apply(ev.JobFinished(T0 + 1, f" {run_}", 0, 0))
    assert state.job(pend).state is JobState.EXIT
    assert state.job(run_).state is JobState.DONE
    check_invariants(state)


@SETTINGS
@given(HISTORIES, st.integers(2, 6))
def test_check_of_a_batch_agrees_with_applying_it_and_changes_nothing(
    templates: list[Any], size: int
) -> None:
    """`ClusterState.check` (a scratch state over overlays) raises exactly when applying the
    batch in order would, and leaves the real state as it was either way."""
    _, events = run(templates, check=False)
    state = ClusterState()
    done: list[Any] = []
    for start in range(0, len(events), size):
        batch = [event for event, _ in events[start : start + size]]
        before = snapshot(state)
        try:
            state.check(batch)
        except XceError:
            ok = False
        else:
            ok = True
        assert snapshot(state) == before
        twin = ClusterState()
        for event in done:
            twin.apply(event)
        try:
            for event in batch:
                twin.apply(event)
        except XceError:
            assert not ok, f"check passed a batch that does not apply: {batch}"
        else:
            assert ok, f"check refused a batch that applies: {batch}"
        for event in batch:  # go on with what applies one by one
            try:
                state.apply(event)
            except XceError:
                continue
            done.append(event)
        check_invariants(state)


def test_reserved_numbers_bound_submissions_and_a_new_block_skips_the_rest() -> None:
    state = ClusterState()
    for e in PRELUDE:
        state.apply(e)
    state.apply(ev.JobNumbersReserved(T0, 1, 3))
    for n in (1, 2, 3):
        state.apply(ev.JobSubmitted(T0, n, spec()))
    with pytest.raises(Conflict):  # 4 is not reserved yet
        state.apply(ev.JobSubmitted(T0, 4, spec()))
    with pytest.raises(Conflict):  # a reservation never goes back
        state.apply(ev.JobNumbersReserved(T0, 2, 9))
    state.apply(ev.JobNumbersReserved(T0, 4, 5))  # extended in place
    state.apply(ev.JobSubmitted(T0, 4, spec()))
    # A new term starts above the highest mark: 5 (reserved, never used) stays a gap.
    state.apply(ev.JobNumbersReserved(T0, 6, 10))
    assert state.next_number == 6 and state.number_ceiling == 10
    with pytest.raises(Conflict):
        state.apply(ev.JobSubmitted(T0, 5, spec()))
    state.apply(ev.JobSubmitted(T0, 6, spec()))
    assert sorted(state.jobs) == ["1", "2", "3", "4", "6"]
