"""Happy paths over HTTP only, with `service.schedule_once()` standing in for the loop."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from .conftest import Api, as_user

JOBS = "/api/v1/jobs"


async def schedule(api: Api) -> int:
    return await api.service.schedule_once()


async def listing(api: Api, query: str = "") -> dict[str, Any]:
    return await api.call("GET", f"{JOBS}?{query}", 200)


def ids(rows: dict[str, Any]) -> list[str]:
    return [row["id"] for row in rows["jobs"]]


async def finish(
    api: Api, host: str, job_id: str, attempt: int = 0, exit_code: int = 0, **extra: Any
) -> bool:
    body = {"attempt": attempt, "exit_code": exit_code, **extra}
    result = await api.call(
        "POST", f"/api/v1/workers/{host}/jobs/{job_id}/finished", 200, json=body
    )
    return result["accepted"]


async def assignments(api: Api, host: str) -> dict[str, dict[str, Any]]:
    data = await api.call("GET", f"/api/v1/workers/{host}/assignments", 200)
    return {a["job_id"]: a for a in data["jobs"]}


async def control(api: Api, job_id: str, action: str) -> list[str]:
    result = await api.call("POST", f"{JOBS}/{job_id}/{action}", 200)
    assert result["action"] == action
    return result["jobs"]


# --- submit, list, show ---------------------------------------------------------------


async def test_submit_then_show(api: Api) -> None:
    job_id = await api.submit(
        command="echo hello",
        name="greet",
        slots=2,
        memory_mb=100,
        walltime_s=60,
        env={"A": "1"},
        cwd="/tmp",
    )
    assert job_id == "1"
    job = await api.show(job_id)
    assert job["id"] == "1" and job["kind"] == "job"
    assert job["state"] == "PEND"
    assert (job["user"], job["queue"], job["name"]) == ("admin", "normal", "greet")
    assert (job["slots"], job["memory_mb"], job["walltime_s"]) == (2, 100, 60)
    assert job["command"] == "echo hello" and job["script"] is None
    assert job["env"] == {"A": "1"} and job["cwd"] == "/tmp"
    assert job["host"] is None and job["attempt"] == 0
    assert await api.submit() == "2"


async def test_submit_script_and_hold(api: Api) -> None:
    job_id = await api.submit(script="#!/bin/sh\necho hi\n", hold=True)
    job = await api.show(job_id)
    assert job["state"] == "PSUSP" and job["script"].startswith("#!/bin/sh")
    await api.register("w1")
    assert await schedule(api) == 0
    await control(api, job_id, "resume")
    assert (await api.show(job_id))["state"] == "PEND"
    assert await schedule(api) == 1


async def test_list_filters(api: Api) -> None:
    alice = await api.call("POST", JOBS, 201, json={"command": "a"}, headers=as_user("alice"))
    bob = await api.call(
        "POST", JOBS, 201, json={"command": "b", "queue": "short"}, headers=as_user("bob")
    )
    bob2 = await api.call(
        "POST", JOBS, 201, json={"command": "c", "slots": 3}, headers=as_user("bob")
    )
    alice, bob, bob2 = alice["job_id"], bob["job_id"], bob2["job_id"]
    await api.register("w1", slots=2)
    await api.register("w2", slots=4)
    assert await schedule(api) == 3
    # short (priority 50) goes first, onto w1; then alice's onto w1; bob2 (3 slots) onto w2
    assert (await api.show(bob))["host"] == "w1"
    assert (await api.show(alice))["host"] == "w1"
    assert (await api.show(bob2))["host"] == "w2"
    await finish(api, "w1", alice)

    assert ids(await listing(api)) == [alice, bob, bob2]
    assert ids(await listing(api, "user=bob")) == [bob, bob2]
    assert ids(await listing(api, "user=carol")) == []
    assert ids(await listing(api, "user=all")) == [alice, bob, bob2]  # bjobs -u all
    assert ids(await listing(api, "user=all&queue=short")) == [bob]
    assert ids(await listing(api, "queue=short")) == [bob]
    assert ids(await listing(api, "host=w1")) == [alice, bob]
    assert ids(await listing(api, "host=w2")) == [bob2]
    assert ids(await listing(api, "state=RUN")) == [bob, bob2]
    assert ids(await listing(api, "state=done")) == [alice]
    assert ids(await listing(api, "state=DONE,RUN&user=bob&queue=normal")) == [bob2]
    row = (await listing(api, "state=DONE"))["jobs"][0]
    assert row["user"] == "alice" and row["exit_code"] == 0


async def test_list_paging(api: Api) -> None:
    submitted = [await api.submit(command=f"echo {i}") for i in range(7)]
    page = await listing(api)
    assert page["total"] == 7 and page["offset"] == 0 and page["limit"] == 1000
    assert ids(page) == submitted
    page = await listing(api, "offset=2&limit=3")
    assert (page["total"], page["offset"], page["limit"]) == (7, 2, 3)
    assert ids(page) == submitted[2:5]
    page = await listing(api, "offset=6&limit=3")
    assert ids(page) == submitted[6:]
    page = await listing(api, "offset=50")
    assert page["jobs"] == [] and page["total"] == 7
    page = await listing(api, "state=PEND&limit=1")
    assert page["total"] == 7 and len(page["jobs"]) == 1


async def test_dependency_waits(api: Api) -> None:
    first = await api.submit()
    second = await api.submit(dependency=f"afterok:{first}")
    assert (await api.show(second))["dependency"] == f"afterok:{first}"
    await api.register("w1")
    assert await schedule(api) == 1
    job = await api.show(second)
    assert job["state"] == "PEND" and "dependency" in job["reason"]
    await finish(api, "w1", first)
    assert await schedule(api) == 1
    assert (await api.show(second))["state"] == "RUN"


async def test_cluster_status(api: Api) -> None:
    await api.submit()
    await api.submit(array="1-5")
    await api.register("w1", slots=1)
    status = await api.call("GET", "/api/v1/cluster", 200)
    assert status["role"] == "primary"
    assert status["jobs"] == 1 and status["arrays"] == 1 and status["hosts"] == 1
    assert status["pending"] == 6
    assert (await api.call("GET", "/healthz", 200)) == {"status": "ok"}


# --- arrays ---------------------------------------------------------------------------


async def test_array_is_one_record_with_counts(api: Api) -> None:
    job_id = await api.submit(command="echo $XCE_ARRAY_INDEX", array="1-6%2")
    record = await api.show(job_id)
    assert record["kind"] == "array" and record["id"] == job_id
    assert record["state"] == "PEND"
    assert record["array"]["spec"] == "1-6" and record["array"]["max_concurrent"] == 2
    assert record["array"]["total"] == 6 and record["array"]["pending_not_started"] == 6
    assert record["array"]["counts"]["PEND"] == 6
    rows = await listing(api)
    assert [(r["id"], r["kind"], r["tasks"]) for r in rows["jobs"]] == [
        (f"{job_id}[1-6]", "array_pending", 6)
    ]
    # a task that has not started can be shown on its own
    task = await api.show(f"{job_id}[4]")
    assert task["kind"] == "task" and task["state"] == "PEND" and task["array_index"] == 4


async def test_array_tasks_appear_as_they_start_within_limit(api: Api) -> None:
    job_id = await api.submit(array="1-6%2")
    await api.register("w1", slots=8)
    assert await schedule(api) == 2, "%2 allows two tasks at once"
    assert await schedule(api) == 0, "the limit holds across passes"
    rows = await listing(api, f"array={job_id}")
    assert ids(rows) == [f"{job_id}[1]", f"{job_id}[2]", f"{job_id}[3-6]"]
    assert [r["state"] for r in rows["jobs"]] == ["RUN", "RUN", "PEND"]
    assert rows["jobs"][0]["kind"] == "task" and rows["jobs"][0]["array_id"] == job_id
    record = await api.show(job_id)
    assert record["state"] == "RUN"
    assert record["array"]["counts"]["RUN"] == 2 and record["array"]["counts"]["PEND"] == 4
    assert "concurrency" in record["reason"]
    assert sorted(await assignments(api, "w1")) == [f"{job_id}[1]", f"{job_id}[2]"]

    assert await finish(api, "w1", f"{job_id}[1]")
    assert await schedule(api) == 1
    rows = await listing(api, f"array={job_id}&state=RUN")
    assert ids(rows) == [f"{job_id}[2]", f"{job_id}[3]"]
    counts = (await api.show(job_id))["array"]["counts"]
    assert (counts["DONE"], counts["RUN"], counts["PEND"]) == (1, 2, 3)


async def test_array_runs_to_done(api: Api) -> None:
    job_id = await api.submit(array="1-5:2")
    await api.register("w1", slots=8)
    assert await schedule(api) == 3
    for index in (1, 3, 5):
        assert await finish(api, "w1", f"{job_id}[{index}]")
    record = await api.show(job_id)
    assert record["state"] == "DONE" and record["array"]["counts"]["DONE"] == 3
    assert record["array"]["spec"] == "1-5:2"


async def test_array_stop_holds_the_rest_and_kill_cancels(api: Api) -> None:
    job_id = await api.submit(array="1-4")
    await api.register("w1", slots=1)
    assert await schedule(api) == 1
    changed = await control(api, job_id, "stop")
    assert f"{job_id}[1]" in changed
    record = await api.show(job_id)
    assert record["array"]["held"] is True
    assert record["array"]["counts"]["USUSP"] == 1 and record["array"]["counts"]["PSUSP"] == 3
    assert (await assignments(api, "w1"))[f"{job_id}[1]"]["action"] == "stop"
    await control(api, job_id, "resume")
    record = await api.show(job_id)
    assert record["array"]["held"] is False and record["array"]["counts"]["RUN"] == 1
    await control(api, job_id, "kill")
    assert (await assignments(api, "w1"))[f"{job_id}[1]"]["action"] == "kill"
    assert await finish(api, "w1", f"{job_id}[1]", exit_code=None, exit_signal=15)
    record = await api.show(job_id)
    assert record["state"] == "EXIT" and record["array"]["counts"]["EXIT"] == 4
    assert (await api.show(f"{job_id}[3]"))["state"] == "EXIT"


# --- job control ----------------------------------------------------------------------


async def test_stop_resume_requeue_kill(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    assert await schedule(api) == 1
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w1", 0)
    assert job["start_time"] is not None

    assert await control(api, job_id, "stop") == [job_id]
    assert (await api.show(job_id))["state"] == "USUSP"
    assert await control(api, job_id, "resume") == [job_id]
    assert (await api.show(job_id))["state"] == "RUN"

    # A requeue of a running job kills its attempt first: the job keeps its host (and may
    # not start elsewhere) until the worker reports that attempt ended.
    assert await control(api, job_id, "requeue") == [job_id]
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w1", 0)
    assert (await assignments(api, "w1"))[job_id]["action"] == "kill"
    assert await schedule(api) == 0
    assert await finish(api, "w1", job_id, attempt=0, exit_code=None, exit_signal=15)
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("PEND", None, 1)
    assert await assignments(api, "w1") == {}
    assert await schedule(api) == 1
    assert (await api.show(job_id))["attempt"] == 1

    await control(api, job_id, "kill")
    job = await api.show(job_id)
    assert job["state"] == "RUN" and job["kill_requested"] is True
    assert await finish(api, "w1", job_id, attempt=1, exit_code=None, exit_signal=15)
    job = await api.show(job_id)
    assert job["state"] == "EXIT" and job["exit_signal"] == 15 and job["end_time"] is not None


async def test_kill_pending_and_stop_pending(api: Api) -> None:
    a, b = await api.submit(), await api.submit()
    await control(api, a, "kill")
    assert (await api.show(a))["state"] == "EXIT"
    await control(api, b, "stop")
    assert (await api.show(b))["state"] == "PSUSP"
    await control(api, b, "resume")
    assert (await api.show(b))["state"] == "PEND"


async def test_failed_job_is_exit_and_can_be_requeued(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    assert await finish(api, "w1", job_id, exit_code=3)
    job = await api.show(job_id)
    assert job["state"] == "EXIT" and job["exit_code"] == 3
    await control(api, job_id, "requeue")
    assert (await api.show(job_id))["state"] == "PEND"


# --- queues ---------------------------------------------------------------------------


async def queues(api: Api) -> dict[str, dict[str, Any]]:
    data = await api.call("GET", "/api/v1/queues", 200)
    return {q["name"]: q for q in data["queues"]}


async def test_queue_list_is_by_priority(api: Api) -> None:
    data = await api.call("GET", "/api/v1/queues", 200)
    assert [q["name"] for q in data["queues"]] == ["short", "normal"]
    assert data["queues"][0]["status"] == "Open:Active"


async def test_queue_create_and_actions(api: Api) -> None:
    created = await api.call(
        "POST",
        "/api/v1/queues",
        201,
        json={
            "name": "gpu",
            "priority": 70,
            "hosts": ["w2"],
            "description": "GPU nodes",
            "on_host_failure": "exit",
        },
    )
    assert created["name"] == "gpu" and created["hosts"] == ["w2"]
    listed = await queues(api)
    assert listed["gpu"]["priority"] == 70 and listed["gpu"]["on_host_failure"] == "exit"
    assert listed["gpu"]["description"] == "GPU nodes"
    assert (await api.call("GET", "/api/v1/queues/gpu", 200))["name"] == "gpu"

    for action, opened, active, status in [
        ("close", False, True, "Closed:Active"),
        ("close", False, True, "Closed:Active"),  # idempotent
        ("deactivate", False, False, "Closed:Inact"),
        ("open", True, False, "Open:Inact"),
        ("activate", True, True, "Open:Active"),
    ]:
        shown = await api.call("POST", f"/api/v1/queues/gpu/{action}", 200)
        assert (shown["open"], shown["active"], shown["status"]) == (opened, active, status)
        assert (await queues(api))["gpu"]["status"] == status


async def test_inactive_queue_keeps_jobs_pending(api: Api) -> None:
    await api.call("POST", "/api/v1/queues/short/deactivate", 200)
    job_id = await api.submit(queue="short")
    await api.register("w1")
    assert await schedule(api) == 0
    job = await api.show(job_id)
    assert job["state"] == "PEND" and "inactive" in job["reason"]
    assert (await queues(api))["short"]["pending"] == 1
    await api.call("POST", "/api/v1/queues/short/activate", 200)
    assert await schedule(api) == 1
    q = (await queues(api))["short"]
    assert (q["pending"], q["running"]) == (0, 1)


async def test_queue_hosts_restrict_placement(api: Api) -> None:
    await api.call("POST", "/api/v1/queues", 201, json={"name": "only2", "hosts": ["w2"]})
    await api.register("w1")
    job_id = await api.submit(queue="only2")
    assert await schedule(api) == 0
    await api.register("w2")
    assert await schedule(api) == 1
    assert (await api.show(job_id))["host"] == "w2"


async def test_queue_counts_suspended(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    await control(api, job_id, "stop")
    q = (await queues(api))["normal"]
    assert (q["pending"], q["running"], q["suspended"]) == (0, 0, 1)


# --- hosts ----------------------------------------------------------------------------


async def hosts(api: Api) -> dict[str, dict[str, Any]]:
    data = await api.call("GET", "/api/v1/hosts", 200)
    return {h["name"]: h for h in data["hosts"]}


async def test_host_list_shows_registration_and_load(api: Api) -> None:
    await api.register("w2", slots=2, memory_mb=1000, rack="r2")
    await api.register("w1", slots=4, memory_mb=2000, rack="r1", group="g")
    data = await api.call("GET", "/api/v1/hosts", 200)
    assert [h["name"] for h in data["hosts"]] == ["w1", "w2"]
    w1 = data["hosts"][0]
    assert (w1["status"], w1["admin"], w1["slots"], w1["memory_mb"]) == ("online", "open", 4, 2000)
    assert w1["rack"] == "r1" and w1["group"] == "g" and w1["attributes"]["rack"] == "r1"
    job_id = await api.submit(slots=3, memory_mb=500)
    await schedule(api)
    w1 = (await hosts(api))["w1"]
    assert (w1["slots_used"], w1["memory_used_mb"], w1["running_jobs"]) == (3, 500, [job_id])
    await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json={"load": {"r1m": 0.5}})
    assert (await api.call("GET", "/api/v1/hosts/w1", 200))["load"] == {"r1m": 0.5}


async def test_host_close_open(api: Api) -> None:
    await api.register("w1")
    shown = await api.call("POST", "/api/v1/hosts/w1/close", 200, json={"reason": "bad fan"})
    assert (shown["admin"], shown["status"], shown["admin_reason"]) == (
        "closed",
        "offline",
        "bad fan",
    )
    assert (await hosts(api))["w1"]["admin"] == "closed"
    job_id = await api.submit()
    assert await schedule(api) == 0
    assert "no online host" in (await api.show(job_id))["reason"]
    shown = await api.call("POST", "/api/v1/hosts/w1/open", 200)
    assert (shown["admin"], shown["status"]) == ("open", "online")
    assert await schedule(api) == 1


async def test_host_drain(api: Api) -> None:
    await api.register("w1")
    await api.register("w2")
    shown = await api.call("POST", "/api/v1/hosts/w2/drain", 200)
    assert shown["admin"] == "drained", "a draining host with no jobs shows drained"
    assert (await hosts(api))["w2"]["admin"] == "drained"

    job_id = await api.submit()
    await schedule(api)
    assert (await api.show(job_id))["host"] == "w1"
    shown = await api.call("POST", "/api/v1/hosts/w1/drain", 200, json={"reason": "disk swap"})
    assert (shown["admin"], shown["admin_reason"]) == ("draining", "disk swap")
    assert (await assignments(api, "w1"))[job_id]["action"] == "run", "running jobs continue"
    assert await finish(api, "w1", job_id)
    assert (await hosts(api))["w1"]["admin"] == "drained"
    await api.submit()
    assert await schedule(api) == 0


# --- worker protocol ------------------------------------------------------------------


async def test_register_returns_assignments(api: Api) -> None:
    first = await api.register("w1")
    assert first["jobs"] == [] and isinstance(first["version"], int)
    job_id = await api.submit(command="echo hi", env={"A": "1"}, outputs=["result/*"])
    await schedule(api)
    again = await api.register("w1")  # a restarted worker gets its jobs back
    assert [a["job_id"] for a in again["jobs"]] == [job_id]
    found = (await assignments(api, "w1"))[job_id]
    assert (found["action"], found["attempt"], found["command"]) == ("run", 0, "echo hi")
    assert found["env"] == {"A": "1"} and found["outputs"] == ["result/*"]
    assert found["user"] == "admin" and found["number"] == 1


async def test_assignment_actions_follow_control(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    assert (await assignments(api, "w1"))[job_id]["action"] == "run"
    await control(api, job_id, "stop")
    assert (await assignments(api, "w1"))[job_id]["action"] == "stop"
    await control(api, job_id, "resume")
    assert (await assignments(api, "w1"))[job_id]["action"] == "run"
    await control(api, job_id, "kill")
    assert (await assignments(api, "w1"))[job_id]["action"] == "kill"
    assert await finish(api, "w1", job_id, exit_code=None, exit_signal=9)
    assert await assignments(api, "w1") == {}


async def test_stale_finish_report_is_not_accepted(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await api.register("w2")
    await schedule(api)
    assert (await api.show(job_id))["host"] == "w1"
    await control(api, job_id, "requeue")
    assert await finish(api, "w1", job_id, attempt=0, exit_code=None, exit_signal=15)
    assert not await finish(api, "w1", job_id, attempt=0), "attempt 0 was requeued"
    await api.call("POST", "/api/v1/hosts/w1/close", 200)
    await schedule(api)
    job = await api.show(job_id)
    assert (job["host"], job["attempt"], job["state"]) == ("w2", 1, "RUN")
    assert not await finish(api, "w1", job_id, attempt=1), "the wrong host"
    assert not await finish(api, "w2", job_id, attempt=0), "an older attempt"
    assert not await finish(api, "w2", "999", attempt=0), "an unknown job"
    assert (await api.show(job_id))["state"] == "RUN"
    assert await finish(api, "w2", job_id, attempt=1)
    assert not await finish(api, "w2", job_id, attempt=1), "reported twice"
    assert (await api.show(job_id))["state"] == "DONE"


async def test_assignments_long_poll_wakes_on_change(api: Api) -> None:
    version = (await api.register("w1"))["version"]
    url = f"/api/v1/workers/w1/assignments?version={version}&timeout=10"
    poll = asyncio.ensure_future(api.call("GET", url, 200))
    await asyncio.sleep(0.05)
    assert not poll.done()
    job_id = await api.submit()
    await schedule(api)
    result = await asyncio.wait_for(poll, 5)
    assert result["version"] > version
    assert [a["job_id"] for a in result["jobs"]] == [job_id]
    # an out-of-date version returns at once
    stale = await asyncio.wait_for(api.call("GET", url, 200), 2)
    assert stale["version"] == result["version"]


async def test_heartbeat_usage_appears_in_show(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    report = {
        "job_id": job_id,
        "attempt": 0,
        "cpu_user_s": 1.5,
        "cpu_system_s": 0.25,
        "max_rss_bytes": 123456,
        "wall_time_s": 4.0,
    }
    stale = {"job_id": job_id, "attempt": 7, "cpu_user_s": 99.0}
    result = await api.call(
        "POST",
        "/api/v1/workers/w1/heartbeat",
        200,
        json={"running": [report, stale], "load": {"r1m": 1.0}},
    )
    assert isinstance(result["version"], int)
    usage = (await api.show(job_id))["usage"]
    assert usage["cpu_user_s"] == 1.5 and usage["cpu_system_s"] == 0.25
    assert usage["cpu_time_s"] == 1.75 and usage["max_rss_bytes"] == 123456
    assert usage["wall_time_s"] >= 4.0
    assert (await listing(api))["jobs"][0]["usage"]["cpu_time_s"] == 1.75
    assert await finish(
        api, "w1", job_id, cpu_user_s=2.0, cpu_system_s=0.5, max_rss_bytes=200000, wall_time_s=5.0
    )
    usage = (await api.show(job_id))["usage"]
    assert usage["cpu_time_s"] == 2.5 and usage["max_rss_bytes"] == 200000


# --- files ----------------------------------------------------------------------------


async def test_inputs_travel_through_the_controller(api: Api) -> None:
    payload = b"line one\nline two\n\x00\xff binary too"
    uploaded = await api.call("POST", "/api/v1/uploads", 201, data=payload)
    assert uploaded["size"] == len(payload) and len(uploaded["upload_id"]) == 32
    other = await api.call("POST", "/api/v1/uploads", 201, data=b"second")
    job_id = await api.submit(
        command="cat data/in.txt",
        inputs={"data/in.txt": uploaded["upload_id"], "./cfg//b.ini": other["upload_id"]},
    )
    assert (await api.show(job_id))["inputs"] == ["cfg/b.ini", "data/in.txt"]
    await api.register("w1")
    await schedule(api)
    assert (await assignments(api, "w1"))[job_id]["inputs"] == ["cfg/b.ini", "data/in.txt"]
    base = f"/api/v1/workers/w1/jobs/{job_id}/inputs"
    resp = await api.client.get(f"{base}/data/in.txt?attempt=0")
    assert resp.status == 200 and resp.content_type == "application/octet-stream"
    assert await resp.read() == payload
    assert await api.call("GET", f"{base}/cfg/b.ini?attempt=0", 200) == b"second"


async def test_an_upload_is_used_once(api: Api) -> None:
    upload_id = (await api.call("POST", "/api/v1/uploads", 201, data=b"x"))["upload_id"]
    await api.submit(inputs={"a": upload_id})
    resp = await api.client.post(JOBS, json={"command": "true", "inputs": {"a": upload_id}})
    assert resp.status == 404


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_outputs_travel_back_to_the_user(api: Api) -> None:
    job_id = await api.submit(outputs=["result/*"])
    await api.register("w1")
    await schedule(api)
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    stored = await api.call("PUT", f"{base}/stdout?attempt=0&first=1", 201, data=b"hello\n")
    assert stored == {"path": "stdout", "size": 6, "sha256": sha(b"hello\n")}
    await api.call("PUT", f"{base}/result/sorted.csv?attempt=0", 201, data=b"a,1\nb,2\n")
    await api.call("PUT", f"{base}/stderr?attempt=0", 201, data=b"")
    assert await finish(api, "w1", job_id, outputs=["result/sorted.csv"])

    files = await api.call("GET", f"{JOBS}/{job_id}/files", 200)
    assert files["job_id"] == job_id
    assert files["files"] == [
        {
            "path": "result/sorted.csv",
            "name": "result/sorted.csv",
            "size": 8,
            "sha256": sha(b"a,1\nb,2\n"),
        },
        {"path": "stderr", "name": "stderr", "size": 0, "sha256": sha(b"")},
        {"path": "stdout", "name": "stdout", "size": 6, "sha256": sha(b"hello\n")},
    ]
    assert (await api.show(job_id))["output_files"] == ["result/sorted.csv"]
    resp = await api.client.get(f"{JOBS}/{job_id}/files/stdout")
    assert resp.status == 200 and await resp.read() == b"hello\n"
    got = await api.call("GET", f"{JOBS}/{job_id}/files/result/sorted.csv", 200)
    assert got == b"a,1\nb,2\n"
    # the attempt is over: the worker may no longer write
    resp = await api.client.put(f"{base}/late.txt?attempt=0", data=b"late")
    assert resp.status == 409


@pytest.mark.timeout(30)  # the failure this guards against is a loop that never yields
async def test_empty_files_one_after_another_are_stored(api: Api) -> None:
    """aiohttp hands every empty body the same stream object, which ends the first reader's
    iteration and never a later one's: the second empty output (an empty stderr after an
    empty stdout) must be stored as the first was, not spin the controller's loop."""
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    for name, first in (("stdout", "&first=1"), ("stderr", ""), ("empty.txt", "")):
        stored = await api.call("PUT", f"{base}/{name}?attempt=0{first}", 201, data=b"")
        assert stored == {"path": name, "size": 0, "sha256": sha(b"")}


async def test_first_output_clears_older_attempt(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await schedule(api)
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    await api.call("PUT", f"{base}/stdout?attempt=0&first=1", 201, data=b"try 0")
    await api.call("PUT", f"{base}/old.txt?attempt=0", 201, data=b"old")
    await control(api, job_id, "requeue")
    assert await finish(api, "w1", job_id, attempt=0, exit_code=None, exit_signal=15)
    await schedule(api)
    await api.call("PUT", f"{base}/stdout?attempt=1&first=1", 201, data=b"try 1")
    files = await api.call("GET", f"{JOBS}/{job_id}/files", 200)
    assert [f["path"] for f in files["files"]] == ["stdout"]
    assert await api.call("GET", f"{JOBS}/{job_id}/files/stdout", 200) == b"try 1"


async def test_task_outputs_are_per_task(api: Api) -> None:
    job_id = await api.submit(array="1-2")
    await api.register("w1")
    await schedule(api)
    for index in (1, 2):
        task = f"{job_id}[{index}]"
        await api.call(
            "PUT",
            f"/api/v1/workers/w1/jobs/{task}/outputs/stdout?attempt=0",
            201,
            data=f"task {index}".encode(),
        )
    for index in (1, 2):
        got = await api.call("GET", f"{JOBS}/{job_id}[{index}]/files/stdout", 200)
        assert got == f"task {index}".encode()


async def test_a_job_no_host_could_ever_run_is_refused_with_the_reason(api: Api) -> None:
    """`-n 10` on 4-slot hosts, a typo in select[] or a value in the wrong
    case was accepted and pended for ever. Judged against the queue's registered hosts;
    `defer` keeps such a job for hosts that register later; nothing is stored when refused."""
    assert (await api.submit(command="true", slots=64)) is not None  # no host yet: accepted
    await api.register("w1", slots=4, memory_mb=8000, type="X86", rack="r1")
    before = len(api.service.state.jobs)
    cases = {
        # no span: the job may spread over hosts, and all of them are too few
        "slots": (
            {"slots": 10},
            "no set of hosts of queue 'normal' can ever hold this job "
            "(10 slots; its hosts have 4 slots in all)",
        ),
        "one host": (
            {"slots": 10, "resources": "span[hosts=1]"},
            "asks for 10 slots on one host; the largest host of queue 'normal' has 4",
        ),
        "memory": ({"memory_mb": 9000}, "asks for 9000 MB of memory"),
        "rusage": ({"resources": "rusage[mem=9000]"}, "asks for 9000 MB of memory"),
        "typo": ({"resources": "select[foo==1]"}, "no host of queue 'normal' defines 'foo'"),
        "case": ({"resources": "select[type==x86]"}, "type is 'X86' on w1, not 'x86'"),
    }
    for name, (extra, expected) in cases.items():
        body = await api.call("POST", "/api/v1/jobs", 400, json={"command": "true", **extra})
        assert expected in body["error"]["message"], (name, body)
        assert "defer" in body["error"]["message"]
    assert len(api.service.state.jobs) == before  # nothing stored
    job = await api.submit(command="true", slots=10, defer=True)
    assert (await api.show(job))["state"] == "PEND"
    assert await api.submit(command="true", slots=4, resources="select[type==X86]")
