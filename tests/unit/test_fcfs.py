"""FCFS first-fit placement on a snapshot of a real ClusterState."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit, submit_array
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched import Plan, snapshot_of
from xce.sched.passes.pipeline import plan


def schedule(state: ClusterState) -> Plan:
    return plan(snapshot_of(state), T0)


def placed(result: Plan) -> list[tuple[str, str]]:
    return [(p.job_id, p.host) for p in result.placements]


def test_empty_cluster_places_nothing() -> None:
    result = schedule(new_state())
    assert result.placements == []
    assert result.reasons == {}


def test_first_fit_by_host_name() -> None:
    # registered out of order: placement goes by name, not registration order
    state = new_state(hosts={"hb": (2, 1000), "ha": (2, 1000), "hc": (2, 1000)})
    jobs = [submit(state) for _ in range(5)]
    assert placed(schedule(state)) == [
        (jobs[0], "ha"),
        (jobs[1], "ha"),
        (jobs[2], "hb"),
        (jobs[3], "hb"),
        (jobs[4], "hc"),
    ]


def test_free_slots_account_for_running_jobs() -> None:
    state = new_state(hosts={"ha": (4, 1000), "hb": (4, 1000)})
    running = submit(state, slots=3)
    state.apply(ev.JobStarted(T0, running, "ha"))
    small, big = submit(state, slots=1), submit(state, slots=2)
    assert placed(schedule(state)) == [(small, "ha"), (big, "hb")]


def test_job_larger_than_any_host_gets_a_reason_and_does_not_block() -> None:
    state = new_state(hosts={"ha": (4, 1000), "hb": (8, 1000)})
    huge = submit(state, slots=9, resources="span[hosts=1]")  # no span would spread it
    small = submit(state, slots=1)
    result = schedule(state)
    assert placed(result) == [(small, "ha")]
    assert result.texts()[huge] == "no host is big enough"
    assert small not in result.reasons


def test_job_waiting_for_free_slots_has_that_reason() -> None:
    state = new_state(hosts={"ha": (2, 1000)})
    first, second = submit(state, slots=2), submit(state, slots=2)
    result = schedule(state)
    assert placed(result) == [(first, "ha")]
    assert result.texts()[second] == "waiting for free slots or memory"


def test_later_small_job_backfills_around_a_blocked_one() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    a, b, c = submit(state, slots=3), submit(state, slots=2), submit(state, slots=1)
    result = schedule(state)
    assert placed(result) == [(a, "ha"), (c, "ha")]
    assert b in result.reasons


def test_memory_is_respected() -> None:
    state = new_state(hosts={"ha": (8, 500), "hb": (8, 2000)})
    fat = submit(state, memory_mb=1500)
    lean = submit(state, memory_mb=400)
    lean2 = submit(state, memory_mb=400)
    too_fat = submit(state, memory_mb=2500)
    result = schedule(state)
    assert placed(result) == [(fat, "hb"), (lean, "ha"), (lean2, "hb")]
    assert result.texts()[too_fat] == "no host is big enough"


def test_memory_held_by_running_jobs_is_not_free() -> None:
    state = new_state(hosts={"ha": (8, 1000)})
    running = submit(state, memory_mb=800)
    state.apply(ev.JobStarted(T0, running, "ha"))
    waiting = submit(state, memory_mb=300)
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[waiting] == "waiting for free slots or memory"


def test_queue_priority_orders_jobs_before_submission_order() -> None:
    state = new_state(
        queues=(QueueRecord("low", priority=1), QueueRecord("high", priority=50)),
        hosts={"ha": (1, 1000)},
    )
    early_low = submit(state, queue="low")
    late_high = submit(state, queue="high")
    result = schedule(state)
    assert placed(result) == [(late_high, "ha")]
    assert early_low in result.reasons


def test_same_priority_is_first_come_first_served() -> None:
    state = new_state(hosts={"ha": (1, 1000)})
    first, second = submit(state), submit(state)
    assert placed(schedule(state)) == [(first, "ha")]
    assert second in schedule(state).reasons


def test_inactive_queue_is_not_dispatched() -> None:
    state = new_state(queues=(QueueRecord("normal"), QueueRecord("off")), hosts={"ha": (4, 1000)})
    stopped = submit(state, queue="off")
    state.apply(ev.QueueDeactivated(T0, "off"))
    ok = submit(state)
    result = schedule(state)
    assert placed(result) == [(ok, "ha")]
    assert result.texts()[stopped] == "queue off is inactive"
    state.apply(ev.QueueActivated(T0, "off"))
    assert (stopped, "ha") in placed(schedule(state))


def test_closed_queue_still_dispatches_what_it_holds() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    job = submit(state)
    state.apply(ev.QueueClosed(T0, "normal"))
    assert placed(schedule(state)) == [(job, "ha")]


def test_dependency_waiting_is_not_placed() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    parent = submit(state)
    child = submit(state, dependency=f"afterok:{parent}")
    result = schedule(state)
    assert placed(result) == [(parent, "ha")]
    assert result.texts()[child] == "waiting for dependency"
    state.apply(ev.JobStarted(T0, parent, "ha"))
    assert schedule(state).texts()[child] == "waiting for dependency"
    state.apply(ev.JobFinished(T0, parent, 0, 0))
    assert placed(schedule(state)) == [(child, "ha")]


def test_dependency_that_can_never_hold_is_not_placed() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    parent = submit(state)
    state.apply(ev.JobKilled(T0, parent))
    child = submit(state, dependency=f"afterok:{parent}")
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[child] == "dependency can never be satisfied"


def test_array_max_concurrent_is_respected() -> None:
    state = new_state(hosts={"ha": (16, 10000)})
    number = submit_array(state, "1-10%3")
    result = schedule(state)
    assert placed(result) == [(f"{number}[{i}]", "ha") for i in (1, 2, 3)]


def test_array_max_concurrent_counts_active_tasks() -> None:
    state = new_state(hosts={"ha": (16, 10000)})
    number = submit_array(state, "1-10%3")
    state.apply(ev.JobStarted(T0, f"{number}[1]", "ha"))
    state.apply(ev.JobStarted(T0, f"{number}[2]", "ha"))
    result = schedule(state)
    assert placed(result) == [(f"{number}[3]", "ha")]
    state.apply(ev.JobStarted(T0, f"{number}[3]", "ha"))
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[str(number)] == "array concurrency limit reached"
    # a finished task frees a place
    state.apply(ev.JobFinished(T0, f"{number}[1]", 0, 0))
    assert placed(schedule(state)) == [(f"{number}[4]", "ha")]


def test_suspended_tasks_still_count_against_the_limit() -> None:
    state = new_state(hosts={"ha": (16, 10000)})
    number = submit_array(state, "1-5%1")
    state.apply(ev.JobStarted(T0, f"{number}[1]", "ha"))
    state.apply(ev.JobSuspended(T0, f"{number}[1]"))
    assert placed(schedule(state)) == []


def test_requeued_task_obeys_the_array_limit() -> None:
    state = new_state(hosts={"ha": (16, 10000)})
    number = submit_array(state, "1-5%2")
    for i in (1, 2):
        state.apply(ev.JobStarted(T0, f"{number}[{i}]", "ha"))
    state.apply(ev.JobRequeued(T0, f"{number}[1]"))
    result = schedule(state)
    # one place is free: the requeued task 1 or the next pending one, never both
    assert len(result.placements) == 1
    assert result.placements[0].job_id in (f"{number}[1]", f"{number}[3]")


def test_array_without_limit_fills_the_hosts() -> None:
    state = new_state(hosts={"ha": (2, 1000), "hb": (1, 1000)})
    number = submit_array(state, "1-10")
    result = schedule(state)
    assert placed(result) == [
        (f"{number}[1]", "ha"),
        (f"{number}[2]", "ha"),
        (f"{number}[3]", "hb"),
    ]
    assert result.texts()[str(number)] == "waiting for free slots or memory"


def test_held_array_is_not_placed() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    number = submit_array(state, "1-3")
    state.apply(ev.ArrayHeld(T0, number))
    assert placed(schedule(state)) == []
    state.apply(ev.ArrayReleased(T0, number))
    assert len(schedule(state).placements) == 3


def test_held_job_is_not_placed() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    submit(state, hold=True)
    assert placed(schedule(state)) == []


def test_closed_host_gets_nothing() -> None:
    state = new_state(hosts={"ha": (4, 1000), "hb": (4, 1000)})
    state.apply(ev.HostClosed(T0, "ha", "maintenance"))
    jobs = [submit(state) for _ in range(5)]
    result = schedule(state)
    assert placed(result) == [(j, "hb") for j in jobs[:4]]
    assert result.texts()[jobs[4]] == "waiting for free slots or memory"


def test_draining_host_gets_nothing() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    state.apply(ev.HostDrainStarted(T0, "ha"))
    job = submit(state)
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[job] == "no online host in the queue"


def test_unavailable_host_gets_nothing_until_it_is_back() -> None:
    state = new_state(hosts={"ha": (4, 1000), "hb": (4, 1000)})
    state.apply(ev.HostUnavailable(T0, "ha"))
    job = submit(state)
    assert placed(schedule(state)) == [(job, "hb")]
    state.apply(ev.HostUnavailable(T0, "hb"))
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[job] == "no online host in the queue"
    state.apply(ev.HostAvailable(T0, "ha"))
    assert placed(schedule(state)) == [(job, "ha")]


def test_queue_host_list_restricts_placement() -> None:
    state = new_state(
        queues=(QueueRecord("normal"), QueueRecord("gpu", hosts=("hc",))),
        hosts={"ha": (4, 1000), "hb": (4, 1000), "hc": (1, 1000)},
    )
    g1, g2 = submit(state, queue="gpu"), submit(state, queue="gpu")
    n = submit(state)
    result = schedule(state)
    assert placed(result) == [(g1, "hc"), (n, "ha")]
    assert result.texts()[g2] == "waiting for free slots or memory"


def test_queue_listing_only_offline_hosts_has_no_host() -> None:
    state = new_state(
        queues=(QueueRecord("normal", hosts=("ha",)),),
        hosts={"ha": (4, 1000), "hb": (4, 1000)},
    )
    state.apply(ev.HostClosed(T0, "ha"))
    job = submit(state)
    result = schedule(state)
    assert placed(result) == []
    assert result.texts()[job] == "no online host in the queue"


def test_array_in_a_higher_priority_queue_goes_first() -> None:
    state = new_state(
        queues=(QueueRecord("normal"), QueueRecord("high", priority=10)),
        hosts={"ha": (2, 1000)},
    )
    job = submit(state)
    number = submit_array(state, "1-5", queue="high")
    result = schedule(state)
    assert placed(result) == [(f"{number}[1]", "ha"), (f"{number}[2]", "ha")]
    assert job in result.reasons


def test_plan_does_not_change_the_state() -> None:
    state = new_state(hosts={"ha": (4, 1000)})
    job = submit(state)
    number = submit_array(state, "1-3")
    before = (dict(state.jobs), dict(state.arrays), dict(state.host_load), list(state.pending))
    schedule(state)
    after = (dict(state.jobs), dict(state.arrays), dict(state.host_load), list(state.pending))
    assert before == after
    assert state.job(job).state.value == "PEND"
    assert state.arrays[number].active == 0
