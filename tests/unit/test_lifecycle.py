"""The job state machine: the transition table and real transitions through ClusterState."""

from __future__ import annotations

import pytest

from tests.unit.helpers import T0, new_state, spec, submit
from xce.core import events as ev
from xce.core import lifecycle
from xce.core.errors import Conflict, NotFound
from xce.core.model import JobState, QueueRecord
from xce.core.state import ClusterState

S = JobState

# The intended machine, written out independently of lifecycle.TRANSITIONS:
# (action, from) -> allowed targets. Every pair not listed must be refused.
EXPECTED = {
    ("start", S.PEND): {S.RUN},
    ("suspend", S.PEND): {S.PSUSP},
    ("suspend", S.RUN): {S.USUSP},
    ("suspend", S.SSUSP): {S.USUSP},
    ("system_suspend", S.RUN): {S.SSUSP},
    ("resume", S.PSUSP): {S.PEND},
    ("resume", S.USUSP): {S.RUN},
    ("resume", S.SSUSP): {S.RUN},
    ("kill", S.PEND): {S.EXIT},
    ("kill", S.PSUSP): {S.EXIT},
    ("kill", S.RUN): {S.RUN, S.EXIT},
    ("kill", S.USUSP): {S.USUSP, S.EXIT},
    ("kill", S.SSUSP): {S.SSUSP, S.EXIT},
    ("finish", S.RUN): {S.DONE, S.EXIT},
    ("finish", S.USUSP): {S.DONE, S.EXIT},
    ("finish", S.SSUSP): {S.DONE, S.EXIT},
    ("requeue", S.RUN): {S.PEND},
    ("requeue", S.USUSP): {S.PEND},
    ("requeue", S.SSUSP): {S.PEND},
    ("requeue", S.DONE): {S.PEND},
    ("requeue", S.EXIT): {S.PEND},
    ("host_lost", S.RUN): {S.PEND, S.EXIT},
    ("host_lost", S.USUSP): {S.PEND, S.EXIT},
    ("host_lost", S.SSUSP): {S.PEND, S.EXIT},
}
ACTIONS = sorted({a for a, _ in EXPECTED})
ALL_PAIRS = [(a, s) for a in ACTIONS for s in JobState]


def test_table_has_exactly_the_expected_actions() -> None:
    assert set(lifecycle.TRANSITIONS) == set(ACTIONS)


@pytest.mark.parametrize(("action", "current"), ALL_PAIRS)
def test_check_allows_exactly_the_expected_moves(action: str, current: JobState) -> None:
    targets = EXPECTED.get((action, current), set())
    assert lifecycle.allowed(action, current) == bool(targets)
    for target in JobState:
        if target in targets:
            lifecycle.check("7", action, current, target)
            continue
        with pytest.raises(Conflict) as info:
            lifecycle.check("7", action, current, target)
        assert "job 7" in info.value.message
        assert current.value in info.value.message
    if targets:
        lifecycle.check("7", action, current)  # no target: only the source state matters
    else:
        with pytest.raises(Conflict, match=r"cannot .* job 7: it is " + current.value):
            lifecycle.check("7", action, current)


def test_refusal_message_lists_the_states_it_is_possible_from() -> None:
    with pytest.raises(Conflict) as info:
        lifecycle.check("12", "resume", S.RUN)
    assert info.value.message == (
        "cannot resume job 12: it is RUN (only possible from PSUSP, USUSP, SSUSP)"
    )
    with pytest.raises(Conflict, match="cannot fail over job 3: it is PEND"):
        lifecycle.check("3", "host_lost", S.PEND)


def test_wrong_target_message_names_both_states() -> None:
    with pytest.raises(Conflict, match="job 5 cannot go from RUN to PEND"):
        lifecycle.check("5", "finish", S.RUN, S.PEND)


def test_conflict_is_http_409() -> None:
    assert Conflict.http_status == 409
    assert Conflict.code == "conflict"


# --- real transitions through ClusterState.apply ------------------------------------------


@pytest.fixture
def state() -> ClusterState:
    return new_state(hosts={"h1": (4, 1000), "h2": (4, 1000)})


def started(state: ClusterState, **kw: object) -> str:
    job = submit(state, **kw)
    state.apply(ev.JobStarted(T0 + 1, job, "h1"))
    return job


def test_submit_makes_a_pending_job(state: ClusterState) -> None:
    state.apply(ev.JobSubmitted(T0, 1, spec(slots=2)))
    job = state.job("1")
    assert job.state is S.PEND
    assert job.submit_time == T0
    assert job.attempt == 0
    assert state.next_number == 2
    assert list(state.pending) == ["1"]


def test_submit_held_job_is_psusp(state: ClusterState) -> None:
    job = submit(state, hold=True)
    assert state.job(job).state is S.PSUSP
    assert job not in state.pending


def test_submit_needs_the_next_number(state: ClusterState) -> None:
    with pytest.raises(Conflict, match="out of order"):
        state.apply(ev.JobSubmitted(T0, 2, spec()))
    assert state.next_number == 1
    assert state.jobs == {}


def test_submit_needs_an_existing_queue() -> None:
    state = ClusterState()
    with pytest.raises(NotFound, match="queue 'normal'"):
        state.apply(ev.JobSubmitted(T0, 1, spec()))
    assert state.next_number == 1
    state.apply(ev.QueueCreated(T0, QueueRecord("normal")))
    state.apply(ev.JobSubmitted(T0, 1, spec()))
    assert state.job("1").state is S.PEND


def test_host_registered_then_reregistered_keeps_admin_state(state: ClusterState) -> None:
    assert state.host("h1").slots == 4
    state.apply(ev.HostClosed(T0 + 1, "h1", "disk"))
    state.apply(ev.HostUnavailable(T0 + 2, "h1"))
    state.apply(ev.HostRegistered(T0 + 3, "h1", 8, 2000, (("rack", "r1"),)))
    host = state.host("h1")
    assert (host.slots, host.memory_mb, host.attributes) == (8, 2000, (("rack", "r1"),))
    assert host.reachable is True
    assert host.admin.value == "closed"
    assert host.admin_reason == "disk"


def test_start_runs_the_job_and_takes_slots(state: ClusterState) -> None:
    job = submit(state, slots=3, memory_mb=200)
    state.apply(ev.JobStarted(T0 + 1, job, "h1"))
    rec = state.job(job)
    assert (rec.state, rec.host, rec.start_time) == (S.RUN, "h1", T0 + 1)
    assert job not in state.pending
    load = state.host_load["h1"]
    assert (load.slots, load.memory_mb, load.jobs) == (3, 200, frozenset({job}))


def test_start_on_unknown_host_is_not_found_and_changes_nothing(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(NotFound, match="host 'nope'"):
        state.apply(ev.JobStarted(T0 + 1, job, "nope"))
    assert state.job(job).state is S.PEND
    assert job in state.pending
    assert state.host_load == {}


def test_start_a_running_job_is_conflict(state: ClusterState) -> None:
    job = started(state)
    with pytest.raises(Conflict, match=f"cannot start job {job}: it is RUN"):
        state.apply(ev.JobStarted(T0 + 2, job, "h2"))
    assert state.job(job).host == "h1"


def test_user_suspend_of_running_job_is_ususp_and_keeps_slots(state: ClusterState) -> None:
    job = started(state, slots=2)
    state.apply(ev.JobSuspended(T0 + 2, job))
    assert state.job(job).state is S.USUSP
    assert state.host_load["h1"].slots == 2


def test_system_suspend_of_running_job_is_ssusp(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobSuspended(T0 + 2, job, by_system=True))
    assert state.job(job).state is S.SSUSP
    # a user stop on top of a system suspend becomes a user suspend
    state.apply(ev.JobSuspended(T0 + 3, job))
    assert state.job(job).state is S.USUSP


def test_suspend_pending_job_is_psusp(state: ClusterState) -> None:
    job = submit(state)
    state.apply(ev.JobSuspended(T0 + 1, job))
    assert state.job(job).state is S.PSUSP
    assert job not in state.pending


def test_system_suspend_of_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match="it is PEND"):
        state.apply(ev.JobSuspended(T0 + 1, job, by_system=True))
    assert state.job(job).state is S.PEND


def test_suspend_a_done_job_is_conflict(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobFinished(T0 + 2, job, 0, 0))
    with pytest.raises(Conflict, match=f"cannot suspend job {job}: it is DONE"):
        state.apply(ev.JobSuspended(T0 + 3, job))


@pytest.mark.parametrize("by_system", [False, True])
def test_resume_suspended_running_job_is_run(state: ClusterState, by_system: bool) -> None:
    job = started(state)
    state.apply(ev.JobSuspended(T0 + 2, job, by_system=by_system))
    state.apply(ev.JobResumed(T0 + 3, job))
    assert state.job(job).state is S.RUN
    assert state.job(job).host == "h1"


def test_resume_psusp_job_is_pending_again(state: ClusterState) -> None:
    job = submit(state, hold=True)
    state.apply(ev.JobResumed(T0 + 1, job))
    assert state.job(job).state is S.PEND
    assert job in state.pending


def test_resume_a_running_job_is_conflict(state: ClusterState) -> None:
    job = started(state)
    with pytest.raises(Conflict) as info:
        state.apply(ev.JobResumed(T0 + 2, job))
    assert info.value.message == (
        f"cannot resume job {job}: it is RUN (only possible from PSUSP, USUSP, SSUSP)"
    )
    assert state.job(job).state is S.RUN


def test_resume_a_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match="it is PEND"):
        state.apply(ev.JobResumed(T0 + 1, job))


def test_kill_request_then_clean_exit_is_exit_killed(state: ClusterState) -> None:
    job = started(state, slots=2)
    state.apply(ev.JobKillRequested(T0 + 2, job))
    rec = state.job(job)
    assert rec.state is S.RUN
    assert rec.kill_requested is True
    assert state.host_load["h1"].slots == 2
    # even a zero exit code is EXIT once a kill was asked for
    state.apply(ev.JobFinished(T0 + 3, job, 0, exit_code=0))
    rec = state.job(job)
    assert (rec.state, rec.reason, rec.end_time) == (S.EXIT, "killed", T0 + 3)
    assert "h1" not in state.host_load  # an idle host has no load entry


def test_kill_request_on_suspended_job_keeps_its_state(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobSuspended(T0 + 2, job))
    state.apply(ev.JobKillRequested(T0 + 3, job))
    assert state.job(job).state is S.USUSP
    assert state.job(job).kill_requested


def test_kill_request_on_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match=f"job {job} cannot go from PEND to PEND"):
        state.apply(ev.JobKillRequested(T0 + 1, job))
    assert not state.job(job).kill_requested


@pytest.mark.parametrize("hold", [False, True])
def test_killed_waiting_job_is_exit_at_once(state: ClusterState, hold: bool) -> None:
    job = submit(state, hold=hold)
    state.apply(ev.JobKilled(T0 + 1, job))
    rec = state.job(job)
    assert (rec.state, rec.reason, rec.end_time) == (S.EXIT, "killed", T0 + 1)
    assert job not in state.pending


def test_killed_running_job_releases_its_slots(state: ClusterState) -> None:
    job = started(state, slots=4)
    state.apply(ev.JobKilled(T0 + 2, job, "killed (host unavailable)"))
    assert state.job(job).state is S.EXIT
    assert state.job(job).reason == "killed (host unavailable)"
    assert "h1" not in state.host_load  # an idle host has no load entry


def test_kill_a_done_job_is_conflict(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobFinished(T0 + 2, job, 0, 0))
    for event in (ev.JobKilled(T0 + 3, job), ev.JobKillRequested(T0 + 3, job)):
        with pytest.raises(Conflict, match=f"cannot kill job {job}: it is DONE"):
            state.apply(event)
    assert state.job(job).state is S.DONE


def test_kill_an_exited_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    state.apply(ev.JobKilled(T0 + 1, job))
    with pytest.raises(Conflict, match="it is EXIT"):
        state.apply(ev.JobKilled(T0 + 2, job))


@pytest.mark.parametrize(
    ("exit_code", "exit_signal", "reason", "want_state", "want_reason"),
    [
        (0, None, "", S.DONE, ""),
        (3, None, "", S.EXIT, ""),
        (None, 9, "", S.EXIT, ""),
        (0, None, "walltime exceeded", S.EXIT, "walltime exceeded"),
    ],
)
def test_finish_outcomes(
    state: ClusterState,
    exit_code: int | None,
    exit_signal: int | None,
    reason: str,
    want_state: JobState,
    want_reason: str,
) -> None:
    job = started(state)
    state.apply(
        ev.JobFinished(T0 + 5, job, 0, exit_code, exit_signal, reason=reason, outputs=("out.txt",))
    )
    rec = state.job(job)
    assert rec.state is want_state
    assert rec.reason == want_reason
    assert (rec.exit_code, rec.exit_signal) == (exit_code, exit_signal)
    assert rec.outputs == ("out.txt",)
    assert rec.end_time == T0 + 5


def test_finish_a_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match=f"cannot finish job {job}: it is PEND"):
        state.apply(ev.JobFinished(T0 + 1, job, 0, 0))
    assert state.job(job).state is S.PEND
    assert job in state.pending


def test_finish_a_suspended_job_is_allowed(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobSuspended(T0 + 2, job, by_system=True))
    state.apply(ev.JobFinished(T0 + 3, job, 0, 1))
    assert state.job(job).state is S.EXIT
    assert "h1" not in state.host_load  # an idle host has no load entry


def test_requeue_running_job_increments_attempt_and_clears_host(state: ClusterState) -> None:
    job = started(state, slots=2, memory_mb=100)
    state.apply(ev.JobKillRequested(T0 + 2, job))
    state.apply(ev.JobRequeued(T0 + 3, job))
    rec = state.job(job)
    assert rec.state is S.PEND
    assert rec.attempt == 1
    assert rec.host is None
    assert rec.start_time is None
    assert rec.kill_requested is False
    assert rec.reason == "requeued"
    assert job in state.pending
    assert "h1" not in state.host_load  # slots, memory and the job all released
    # it can be started again, on another host
    state.apply(ev.JobStarted(T0 + 4, job, "h2"))
    assert state.job(job).host == "h2"
    assert state.host_load["h2"].slots == 2


def test_requeue_finished_job_clears_results(state: ClusterState) -> None:
    job = started(state)
    state.apply(ev.JobFinished(T0 + 2, job, 0, 1, outputs=("a",)))
    state.apply(ev.JobRequeued(T0 + 3, job, "again"))
    rec = state.job(job)
    assert (rec.state, rec.attempt, rec.reason) == (S.PEND, 1, "again")
    assert (rec.exit_code, rec.end_time, rec.outputs) == (None, None, ())


def test_requeue_a_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match=f"cannot requeue job {job}: it is PEND"):
        state.apply(ev.JobRequeued(T0 + 1, job))
    assert state.job(job).attempt == 0


def test_host_lost_with_requeue_makes_the_job_pending(state: ClusterState) -> None:
    job = started(state, slots=2)
    state.apply(ev.JobHostLost(T0 + 2, job, requeue=True))
    rec = state.job(job)
    assert (rec.state, rec.attempt, rec.host) == (S.PEND, 1, None)
    assert rec.reason == "host h1 became unavailable"
    assert job in state.pending
    assert "h1" not in state.host_load  # an idle host has no load entry


def test_host_lost_without_requeue_exits_the_job(state: ClusterState) -> None:
    job = started(state, slots=2)
    state.apply(ev.JobSuspended(T0 + 2, job))
    state.apply(ev.JobHostLost(T0 + 3, job, requeue=False))
    rec = state.job(job)
    assert (rec.state, rec.attempt, rec.end_time) == (S.EXIT, 0, T0 + 3)
    assert rec.reason == "host h1 became unavailable"
    assert job not in state.pending
    assert "h1" not in state.host_load  # an idle host has no load entry


def test_host_lost_for_a_pending_job_is_conflict(state: ClusterState) -> None:
    job = submit(state)
    with pytest.raises(Conflict, match=f"cannot fail over job {job}: it is PEND"):
        state.apply(ev.JobHostLost(T0 + 1, job, requeue=True))


def test_finish_report_for_a_stale_attempt_is_conflict(state: ClusterState) -> None:
    job = started(state, slots=2)
    state.apply(ev.JobRequeued(T0 + 2, job))
    state.apply(ev.JobStarted(T0 + 3, job, "h2"))
    with pytest.raises(Conflict, match=f"job {job}: report for attempt 0, now 1"):
        state.apply(ev.JobFinished(T0 + 4, job, 0, 0))
    rec = state.job(job)
    assert (rec.state, rec.host) == (S.RUN, "h2")
    assert state.host_load["h2"].slots == 2
    state.apply(ev.JobFinished(T0 + 5, job, 1, 0))
    assert state.job(job).state is S.DONE


def test_usage_report_for_running_job_only(state: ClusterState) -> None:
    from xce.core.model import Usage

    job = started(state)
    usage = Usage(cpu_user_s=1.5, max_rss_bytes=10)
    state.apply(ev.JobUsageReported(T0 + 2, job, 0, usage))
    assert state.job(job).usage == usage
    with pytest.raises(Conflict):
        state.apply(ev.JobUsageReported(T0 + 2, job, 1, usage))
    state.apply(ev.JobFinished(T0 + 3, job, 0, 0))
    assert state.job(job).usage == usage  # kept when the final report carries none
    with pytest.raises(Conflict):
        state.apply(ev.JobUsageReported(T0 + 4, job, 0, usage))


def test_events_for_unknown_jobs_are_not_found(state: ClusterState) -> None:
    for event in (
        ev.JobStarted(T0, "99", "h1"),
        ev.JobKilled(T0, "99"),
        ev.JobResumed(T0, "99"),
        ev.JobFinished(T0, "99", 0, 0),
    ):
        with pytest.raises(NotFound, match="job 99 does not exist"):
            state.apply(event)
