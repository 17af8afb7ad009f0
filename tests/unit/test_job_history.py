"""Job history: kept entries merged with the records, live and after a restart (pure)."""

from __future__ import annotations

from xce.controller.history import JobHistory
from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.core.state import ClusterState

SPEC = JobSpec("alice", "normal", command="x", submit_host="login1")


def _cluster(*hosts: str) -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    for host in hosts or ("w1",):
        state.apply(ev.HostRegistered(0.0, host, 8, 1000))
    return state


def _run(state: ClusterState, history: JobHistory, *events: ev.Event) -> None:
    for event in events:
        state.apply(event)
        history.observe(event)


def _events(history: JobHistory, state: ClusterState, job_id: str) -> list[tuple]:
    return [(e["at"], e["event"]) for e in history.job_entries(state.job(job_id))]


def test_a_plain_run_keeps_nothing_and_reads_from_the_record() -> None:
    state = _cluster()
    history = JobHistory(state, since=0.5)
    _run(
        state,
        history,
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobUsageReported(3.0, "1", 0, Usage(1.0, 0.1, 10, 1.0)),
        ev.JobFinished(4.0, "1", 0, 3),
    )
    assert history.kept == {}
    entries = history.job_entries(state.job("1"))
    assert [(e["at"], e["event"]) for e in entries] == [
        (1.0, "submitted"),
        (2.0, "started"),
        (4.0, "finished"),
    ]
    assert entries[0]["detail"] == "to queue normal by alice from login1"
    assert entries[1]["detail"] == "on w1 (attempt 0)"
    assert entries[2]["detail"] == "EXIT, exit code 3"


def test_suspend_resume_requeue_and_kill_in_order() -> None:
    state = _cluster("w1", "w2")
    history = JobHistory(state, since=0.5)
    _run(
        state,
        history,
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobSuspended(3.0, "1"),
        ev.JobResumed(4.0, "1"),
        ev.JobFinished(5.0, "1", 0, 1),
        ev.JobRequeued(6.0, "1"),
        ev.JobStarted(7.0, "1", "w2"),
        ev.JobSuspended(8.0, "1", by_system=True),
        ev.JobKillRequested(9.0, "1"),
        ev.JobFinished(10.0, "1", 1, 143),
    )
    assert _events(history, state, "1") == [
        (1.0, "submitted"),
        (2.0, "started"),
        (3.0, "suspended"),
        (4.0, "resumed"),
        (5.0, "finished"),
        (6.0, "requeued"),
        (7.0, "started"),
        (8.0, "suspended"),
        (9.0, "kill_requested"),
        (10.0, "finished"),
    ]
    details = [e["detail"] for e in history.job_entries(state.job("1"))]
    assert details[1] == "on w1 (attempt 0)" and details[6] == "on w2 (attempt 1)"
    assert details[4] == "EXIT, exit code 1" and details[5] == "requeued; attempt 1 waits"
    assert details[7] == "by the system; now SSUSP"
    assert details[9] == "EXIT, exit code 143 (killed)"


def test_a_lost_host_requeues_or_ends_the_job() -> None:
    state = _cluster()
    history = JobHistory(state, since=0.5)
    _run(
        state,
        history,
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobSubmitted(1.0, 2, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobStarted(2.0, "2", "w1"),
        ev.HostUnavailable(3.0, "w1"),
        ev.JobHostLost(3.0, "1", True),
        ev.JobHostLost(3.0, "2", False),
    )
    assert _events(history, state, "1") == [
        (1.0, "submitted"),
        (2.0, "started"),
        (3.0, "host_lost"),
        (3.0, "requeued"),
    ]
    assert _events(history, state, "2") == [
        (1.0, "submitted"),
        (2.0, "started"),
        (3.0, "host_lost"),
        (3.0, "finished"),
    ]


def test_killed_before_it_started() -> None:
    state = _cluster()
    history = JobHistory(state, since=0.5)
    _run(state, history, ev.JobSubmitted(1.0, 1, SPEC), ev.JobKilled(2.0, "1"))
    entries = history.job_entries(state.job("1"))
    assert [(e["event"], e["detail"]) for e in entries][1:] == [("killed", "killed")]


def test_array_holds_show_on_the_array_and_on_tasks_that_waited() -> None:
    state = _cluster()
    history = JobHistory(state, since=0.5)
    spec = parse_array_spec("1-3", 100)
    _run(
        state,
        history,
        ev.ArraySubmitted(1.0, 1, SPEC, spec.indices),
        ev.JobStarted(2.0, "1[1]", "w1"),
        ev.ArrayHeld(3.0, 1),
        ev.ArrayReleased(4.0, 1),
        ev.JobStarted(5.0, "1[2]", "w1"),
        ev.ArrayCancelled(6.0, 1),
    )
    assert [e["event"] for e in history.array_entries(state.arrays[1])] == [
        "submitted",
        "held",
        "released",
        "cancelled",
    ]
    assert [e for _, e in _events(history, state, "1[1]")] == ["submitted", "started"]
    assert [e for _, e in _events(history, state, "1[2]")] == [
        "submitted",
        "held",
        "released",
        "started",
    ]
    assert [e for _, e in _events(history, state, "1[3]")] == [
        "submitted",
        "held",
        "released",
        "cancelled",
    ]
    first = history.job_entries(state.job("1[1]"))[0]["detail"]
    assert first.startswith("as a task of job array 1 to queue normal")


def test_after_a_restart_what_the_records_lost_shows_without_a_time() -> None:
    state = _cluster()
    live = JobHistory(state, since=0.5)
    _run(
        state,
        live,
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobRequeued(3.0, "1"),
        ev.JobStarted(4.0, "1", "w1"),
        ev.JobSuspended(5.0, "1"),
        ev.JobKillRequested(6.0, "1"),
    )
    rebuilt = JobHistory(state, since=10.0)  # a new controller on the recovered state
    assert _events(rebuilt, state, "1") == [
        (1.0, "submitted"),
        (None, "requeued"),
        (4.0, "started"),
        (None, "suspended"),
        (None, "kill_requested"),
    ]
    assert "1 earlier attempt(s)" in rebuilt.job_entries(state.job("1"))[1]["detail"]
    # What happens from now on is exact again, and not doubled by the approximations.
    _run(state, rebuilt, ev.JobResumed(11.0, "1"))
    assert _events(rebuilt, state, "1") == [
        (1.0, "submitted"),
        (None, "requeued"),
        (4.0, "started"),
        (None, "suspended"),
        (None, "kill_requested"),
        (11.0, "resumed"),
    ]


def test_kept_entries_are_bounded_and_pruned_with_the_jobs() -> None:
    state = _cluster()
    history = JobHistory(state, since=0.5)
    _run(state, history, ev.JobSubmitted(1.0, 1, SPEC), ev.JobStarted(2.0, "1", "w1"))
    for n in range(40):
        _run(state, history, ev.JobSuspended(3.0 + 2 * n, "1"), ev.JobResumed(4.0 + 2 * n, "1"))
    assert len(history.kept["1"]) == 50
    assert len(history.job_entries(state.job("1"))) == 52  # + submitted, started
    _run(state, history, ev.JobFinished(100.0, "1", 0, 0))
    state.apply(ev.JobsPurged(1001.0, tuple(state.purgeable(cutoff=1000.0))))
    history.prune()
    assert history.kept == {}


def test_a_job_running_across_a_restart_keeps_its_start_when_requeued() -> None:
    state = _cluster()
    _run(
        state,
        JobHistory(state, since=0.5),
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
    )
    rebuilt = JobHistory(state, since=3.0)
    _run(state, rebuilt, ev.JobRequeued(4.0, "1"), ev.JobStarted(5.0, "1", "w1"))
    assert _events(rebuilt, state, "1") == [
        (1.0, "submitted"),
        (2.0, "started"),
        (4.0, "requeued"),
        (5.0, "started"),
    ]
