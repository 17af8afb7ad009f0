"""Preemption through the in-process controller: queues that preempt,
suspend and requeue modes, victims chosen few and recent, the minimum run time, resumes,
reasons on both jobs and the memory a suspended victim keeps."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api, as_user
from xce.controller.requests import FinishReport
from xce.core import events as ev


async def _queues(api: Api, mode: str = "suspend", min_run: int = 0) -> None:
    await api.call("POST", "/api/v1/queues", 201, json={"name": "low", "priority": 10})
    await api.call(
        "POST",
        "/api/v1/queues",
        201,
        json={
            "name": "high",
            "priority": 90,
            "preempt": ["low"],
            "preempt_mode": mode,
            "preempt_min_run_s": min_run,
        },
    )


async def _run(api: Api, **body: Any) -> str:
    job = await api.submit(command="sleep 100", **body)
    await api.service.schedule_once()
    return job


def _job(api: Api, job_id: str) -> Any:
    return api.service.state.jobs[job_id]


async def _finish(api: Api, job_id: str) -> None:
    job = _job(api, job_id)
    assert await api.gateway.finished(job.host, FinishReport(job_id, job.attempt, 0))


async def test_suspend_mode_victim_resumes_when_the_preemptor_ends(api: Api) -> None:
    await _queues(api)
    await api.register("w1", slots=2, memory_mb=1000)
    low = await _run(api, queue="low", slots=2, memory_mb=600)
    assert _job(api, low).state.value == "RUN"
    high = await _run(api, queue="high", slots=2, memory_mb=300)
    assert _job(api, low).state.value == "SSUSP"
    assert _job(api, low).preempted_by == high
    assert (await api.show(low))["reason"] == f"preempted by job {high}"
    assert f"suspending job {low} on host w1" in (await api.show(high))["reason"]
    history = {e["event"]: e["detail"] for e in (await api.show(high))["history"]}
    assert history["preempting"] == f"job {low} on w1 is suspended for it"
    history = {e["event"]: e["detail"] for e in (await api.show(low))["history"]}
    assert history["preempted"].startswith(f"by job {high}: suspended")
    load = api.service.state.host_load["w1"]
    assert (load.slots, load.memory_mb) == (0, 600)  # its memory is still counted
    await api.service.schedule_once()
    assert _job(api, high).state.value == "RUN"
    assert _job(api, low).state.value == "SSUSP"  # no slot for it yet
    polled = await api.call(
        "GET", "/api/v1/workers/w1/assignments?version=0", 200, headers=as_user("w1", "worker")
    )
    actions = {j["job_id"]: j["action"] for j in polled["jobs"]}
    assert actions == {low: "stop", high: "run"}
    await _finish(api, high)
    await api.service.schedule_once()
    assert _job(api, low).state.value == "RUN" and _job(api, low).preempted_by == ""
    assert api.service.state.host_load["w1"].slots == 2


async def test_a_suspended_victim_goes_back_before_jobs_queued_behind_it(api: Api) -> None:
    await _queues(api)
    await api.register("w1", slots=2)
    low = await _run(api, queue="low", slots=2)
    high = await _run(api, queue="high", slots=2)
    await api.service.schedule_once()
    later = await api.submit(command="sleep 1", queue="low", slots=2)
    await _finish(api, high)
    await api.service.schedule_once()
    assert _job(api, low).state.value == "RUN"
    assert _job(api, later).state.value == "PEND"


async def test_requeue_mode_and_no_second_victim_while_the_first_ends(api: Api) -> None:
    await _queues(api, mode="requeue")
    await api.register("w1", slots=2)
    low = await _run(api, queue="low", slots=1)
    other = await _run(api, queue="low", slots=1)
    high = await _run(api, queue="high", slots=1)
    victim, spared = (low, other) if _job(api, low).kill_requested else (other, low)
    assert _job(api, victim).requeue_requested and _job(api, victim).preempted_by == high
    assert not _job(api, spared).kill_requested
    await api.service.schedule_once()  # the victim has not ended yet: nobody else is taken
    assert not _job(api, spared).kill_requested
    assert "are ending" in (await api.show(high))["reason"]
    await _finish(api, victim)  # the worker reports the killed attempt
    assert _job(api, victim).state.value == "PEND" and _job(api, victim).attempt == 1
    assert "preempted by job" in _job(api, victim).reason
    await api.service.schedule_once()
    assert _job(api, high).state.value == "RUN"
    await _finish(api, high)
    await api.service.schedule_once()
    assert _job(api, victim).state.value == "RUN"


async def test_fewest_then_most_recent_victims_and_the_minimum_run_time(api: Api) -> None:
    await _queues(api)
    await api.register("w1", slots=4)
    clock = [1000.0]
    api.service.clock = lambda: clock[0]
    big = await _run(api, queue="low", slots=2)
    clock[0] += 10
    old = await _run(api, queue="low", slots=1)
    clock[0] += 10
    new = await _run(api, queue="low", slots=1)
    clock[0] += 10
    high = await _run(api, queue="high", slots=1)
    assert [j for j in (big, old, new) if _job(api, j).preempted_by] == [new]  # most recent
    await api.service.schedule_once()
    clock[0] += 10
    wide = await _run(api, queue="high", slots=2)
    # two slots: `big` alone (one victim) rather than `old` and another
    assert _job(api, big).preempted_by == wide and not _job(api, old).preempted_by
    assert _job(api, high).state.value == "RUN"
    # the minimum run time: nothing younger than it is taken
    await api.call("PATCH", "/api/v1/queues/high", 200, json={"preempt_min_run_s": 3600})
    await api.service.schedule_once()
    third = await _run(api, queue="high", slots=1)
    assert not _job(api, old).preempted_by
    assert (await api.show(third))["reason"].startswith("waiting for free slots or memory")


async def test_a_queue_that_does_not_preempt_waits_and_bad_settings_are_refused(api: Api) -> None:
    await api.register("w1", slots=1)
    await api.call("POST", "/api/v1/queues", 201, json={"name": "low", "priority": 10})
    low = await _run(api, queue="low")
    waiting = await _run(api, queue="short")  # priority 50 but preempts nothing
    assert _job(api, low).state.value == "RUN" and _job(api, waiting).state.value == "PEND"
    for body, expected in [
        ({"preempt": ["nosuch"]}, "does not exist"),
        ({"preempt": ["short"]}, "cannot preempt itself"),
        ({"preempt_mode": "kill"}, "preempt_mode"),
    ]:
        answer = await api.call("PATCH", "/api/v1/queues/short", 400, json=body)
        assert expected in answer["error"]["message"], answer
    # a queue created to preempt itself is told so, not that it does not exist yet
    answer = await api.call(
        "POST", "/api/v1/queues", 400, json={"name": "selfish", "preempt": ["low", "selfish"]}
    )
    assert answer["error"]["message"] == "queue 'selfish' cannot preempt itself", answer
    assert "selfish" not in api.service.state.queues
    shown = await api.call(
        "PATCH", "/api/v1/queues/short", 200, json={"preempt": ["low"], "preempt_mode": "requeue"}
    )
    assert shown["preempt"] == ["low"] and shown["preempt_mode"] == "requeue"
    await api.service.schedule_once()
    assert _job(api, low).requeue_requested


async def test_the_preemption_events_replay_to_the_same_state(api: Api) -> None:
    """Recovery is replay: the same events on a fresh state give the same records and
    the same host load (a suspended victim's slots free, its memory held)."""
    from xce.core.state import ClusterState

    log: list[ev.Event] = []
    api.service.listeners.append(log.append)
    await _queues(api)
    await api.register("w1", slots=2, memory_mb=1000)
    await _run(api, queue="low", slots=2, memory_mb=100)
    await _run(api, queue="high", slots=2)
    await api.service.schedule_once()
    assert any(isinstance(e, ev.JobPreempted) for e in log)
    fresh = ClusterState()
    for name, queue in api.service.state.queues.items():
        if name not in ("low", "high"):
            fresh.apply(ev.QueueCreated(0.0, queue))
    for event in log:
        fresh.apply(event)
    assert fresh.jobs == api.service.state.jobs
    assert fresh.host_load == api.service.state.host_load


async def test_a_waiting_preemptor_gets_the_freed_slots_before_the_victim(api: Api) -> None:
    await _queues(api)
    await api.register("w1", slots=2)
    low = await _run(api, queue="low", slots=2)
    first = await _run(api, queue="high", slots=2)
    await api.service.schedule_once()
    second = await api.submit(command="sleep 1", queue="high", slots=2)
    await api.service.schedule_once()
    assert _job(api, second).state.value == "PEND"
    await _finish(api, first)
    await api.service.schedule_once()
    assert _job(api, second).state.value == "RUN"
    assert _job(api, low).state.value == "SSUSP"
    await _finish(api, second)
    await api.service.schedule_once()
    assert _job(api, low).state.value == "RUN"
