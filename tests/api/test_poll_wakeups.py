"""Which commits wake a worker's long poll (xce/controller/host_changes.py): every change to
what a host is told, never a report that only repeats what the host itself said (its own
attempt's end, its usage), since each wake-up is a request and an answer for nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from .conftest import Api, as_user
from .test_jobs_api import finish

WORKER = as_user("w1", "worker")


def version(api: Api, host: str) -> int:
    return api.service.host_versions.get(host, 0)


async def running_job(api: Api, host: str = "w1", **spec: Any) -> str:
    job_id = await api.submit(command="sleep 100", **spec)
    assert await api.service.schedule_once() == 1
    assert api.service.state.jobs[job_id].host == host
    return job_id


async def test_a_hosts_own_finish_report_leaves_its_poll_waiting(api: Api) -> None:
    await api.register("w1", slots=4)
    job_id = await running_job(api)
    seen = version(api, "w1")
    path = f"/api/v1/workers/w1/assignments?version={seen}&timeout=30"
    poll = asyncio.ensure_future(api.call("GET", path, 200, headers=WORKER))
    assert await finish(api, "w1", job_id)
    assert api.service.state.jobs[job_id].state.value == "DONE"
    assert version(api, "w1") == seen
    # a round trip through the same server: a woken poll would have answered by now
    await api.call("GET", "/api/v1/hosts", 200)
    assert not poll.done()
    # what is news to the host still wakes it, and its answer has no trace of the old job
    second = await running_job(api)
    answer = await asyncio.wait_for(poll, 10)
    assert [entry["job_id"] for entry in answer["jobs"]] == [second]
    assert answer["version"] == version(api, "w1") > seen


async def test_usage_reports_wake_no_one(api: Api) -> None:
    await api.register("w1", slots=4)
    job_id = await running_job(api)
    seen = version(api, "w1")
    report = {"job_id": job_id, "attempt": 0, "cpu_user_s": 3.0, "max_rss_bytes": 1 << 20}
    await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json={"running": [report]})
    usage = api.service.state.jobs[job_id].usage
    assert usage is not None and usage.cpu_user_s == 3.0  # the report was committed
    assert version(api, "w1") == seen


async def test_a_requeue_or_kill_the_controller_asks_for_wakes_the_host(api: Api) -> None:
    await api.register("w1", slots=4)
    job_id = await running_job(api)
    seen = version(api, "w1")
    await api.call("POST", f"/api/v1/jobs/{job_id}/requeue", 200)
    assert version(api, "w1") > seen  # the worker must hear of the kill it is asked for
    seen = version(api, "w1")
    # the attempt the requeue asked to end has ended: the host said so itself
    assert await finish(api, "w1", job_id, exit_signal=15)
    assert api.service.state.jobs[job_id].state.value == "PEND"
    assert version(api, "w1") == seen


async def test_a_multi_host_finish_wakes_the_other_hosts_for_their_shares(api: Api) -> None:
    await api.register("w1", slots=2)
    await api.register("w2", slots=2)
    job_id = await api.submit(command="sleep 100", slots=4, resources="span[ptile=2]")
    assert await api.service.schedule_once() == 1
    job = api.service.state.jobs[job_id]
    first = job.host
    assert first is not None
    other = "w2" if first == "w1" else "w1"
    assert {part.host for part in job.hosts} == {"w1", "w2"}
    before = {host: version(api, host) for host in ("w1", "w2")}
    assert await finish(api, first, job_id)
    assert version(api, first) == before[first]
    assert version(api, other) > before[other]  # its share's cgroup is released
    shares = await api.call(
        "GET", f"/api/v1/workers/{other}/assignments", 200, headers=as_user(other, "worker")
    )
    assert shares["shares"] == []
