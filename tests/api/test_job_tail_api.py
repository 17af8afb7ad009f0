"""The tail route and job history over HTTP, with heartbeats sent by hand."""

from __future__ import annotations

import base64
from typing import Any

from xce.api.http import TAILS

from .conftest import Api, login

JOBS = "/api/v1/jobs"


def _chunk(data: bytes, offset: int = 0) -> dict[str, Any]:
    return {"offset": offset, "data": base64.b64encode(data).decode()}


async def _beat(
    api: Api,
    host: str,
    job_id: str,
    attempt: int = 0,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **streams: dict[str, Any],
) -> Any:
    body = {"running": [{"job_id": job_id, "attempt": attempt, "output": streams}]}
    return await api.call(
        "POST", f"/api/v1/workers/{host}/heartbeat", status, json=body, headers=headers or {}
    )


async def _running_job(api: Api, **body: Any) -> str:
    await api.register("w1")
    job_id = await api.submit(**body)
    assert await api.service.schedule_once() == 1
    return job_id


async def test_heartbeat_output_is_served_by_the_tail_route(api: Api) -> None:
    job_id = await _running_job(api)
    tail = await api.call("GET", f"{JOBS}/{job_id}/tail", 200)
    assert tail == {
        "job_id": job_id,
        "stream": "stdout",
        "attempt": 0,
        "state": "RUN",
        "running": True,
        "offset": 0,
        "next_offset": 0,
        "end": 0,
        "data": "",
        "truncated": False,
    }
    await _beat(api, "w1", job_id, stdout=_chunk(b"hello\n"), stderr=_chunk(b"oops\n"))
    tail = await api.call("GET", f"{JOBS}/{job_id}/tail", 200)
    assert (tail["data"], tail["next_offset"], tail["end"]) == ("hello\n", 6, 6)
    await _beat(api, "w1", job_id, stdout=_chunk(b"world\n", 6))
    tail = await api.call("GET", f"{JOBS}/{job_id}/tail?offset=6", 200)
    assert (tail["offset"], tail["data"]) == (6, "world\n")
    err = await api.call("GET", f"{JOBS}/{job_id}/tail?stream=stderr", 200)
    assert err["data"] == "oops\n" and err["stream"] == "stderr"
    # A host that does not run the job, or an old attempt, is not listened to.
    await api.register("w2")
    await _beat(api, "w2", job_id, stdout=_chunk(b"forged\n", 12))
    await _beat(api, "w1", job_id, attempt=5, stdout=_chunk(b"forged\n", 12))
    assert (await api.call("GET", f"{JOBS}/{job_id}/tail", 200))["end"] == 12


async def test_a_finished_job_is_served_from_its_file_and_its_buffer_is_gone(api: Api) -> None:
    job_id = await _running_job(api)
    await _beat(api, "w1", job_id, stdout=_chunk(b"partial"))
    assert job_id in api.app[TAILS].jobs
    await api.call(
        "PUT",
        f"/api/v1/workers/w1/jobs/{job_id}/outputs/stdout?attempt=0&first=1",
        201,
        data=b"partial and the rest\n",
    )
    await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        200,
        json={"attempt": 0, "exit_code": 0},
    )
    assert job_id not in api.app[TAILS].jobs
    tail = await api.call("GET", f"{JOBS}/{job_id}/tail?offset=7", 200)
    assert tail["running"] is False and tail["state"] == "DONE"
    assert (tail["offset"], tail["data"], tail["end"]) == (7, " and the rest\n", 21)
    none = await api.call("GET", f"{JOBS}/{job_id}/tail?stream=stderr", 200)
    assert (none["data"], none["end"]) == ("", 0)  # no file: nothing, not an error


async def test_malformed_or_unknown_output_never_costs_the_heartbeat(api: Api) -> None:
    job_id = await _running_job(api)
    await _beat(api, "w1", job_id, stdout={"offset": 0, "data": "%%% not base64"})
    assert (await api.call("GET", f"{JOBS}/{job_id}/tail", 200))["end"] == 0
    body = await _beat(api, "w1", job_id, status=400, stdin=_chunk(b"x"))
    assert "stdin" in body["error"]["message"]  # the worker then resends without output
    # Over this controller's body limit (64 KiB here): the worker then halves its budget.
    too_big = {"offset": 0, "data": "A" * (80 * 1024)}
    await _beat(api, "w1", job_id, status=413, stdout=too_big)


async def test_bad_tail_parameters_are_400(api: Api) -> None:
    job_id = await _running_job(api)
    for query in (
        "stream=both",
        "offset=-3",
        "offset=1.5",
        "limit=0",
        f"limit={2 * 1024 * 1024}",
        "follow=1",
    ):
        body = await api.call("GET", f"{JOBS}/{job_id}/tail?{query}", 400)
        assert body["error"]["code"] == "invalid_request", query
    array = await api.submit(array="3-5")
    body = await api.call("GET", f"{JOBS}/{array}/tail", 400)
    assert f"{array}[3]" in body["error"]["message"]
    await api.call("GET", f"{JOBS}/999/tail", 404)


async def test_users_tail_only_the_jobs_they_may_see(tenants: Api) -> None:
    alice, bob = await login(tenants, "alice"), await login(tenants, "bob")
    root = await login(tenants, "root")
    tenants.client.session.headers.update(root)
    job_id = (
        await tenants.call("POST", JOBS, 201, json={"command": "echo secret"}, headers=alice)
    )["job_id"]
    await tenants.register("w1")
    await tenants.service.schedule_once()
    await _beat(tenants, "w1", job_id, headers=root, stdout=_chunk(b"alice's secret\n"))
    mine = await tenants.call("GET", f"{JOBS}/{job_id}/tail", 200, headers=alice)
    assert mine["data"] == "alice's secret\n"
    body = await tenants.call("GET", f"{JOBS}/{job_id}/tail", 403, headers=bob)
    assert body["error"]["message"].startswith("bob may not")
    assert "secret" not in str(body)


async def test_show_carries_the_history(api: Api) -> None:
    job_id = await _running_job(api)
    for action in ("stop", "resume", "kill"):
        await api.call("POST", f"{JOBS}/{job_id}/{action}", 200)
    await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        200,
        json={"attempt": 0, "exit_code": 143},
    )
    job = await api.show(job_id)
    assert [h["event"] for h in job["history"]] == [
        "submitted",
        "started",
        "suspended",
        "resumed",
        "kill_requested",
        "finished",
    ]
    assert job["history"][-1]["detail"] == "EXIT, exit code 143 (killed)"
    array = await api.submit(array="1-2")
    await api.call("POST", f"{JOBS}/{array}/stop", 200)
    shown = await api.show(array)
    assert [h["event"] for h in shown["history"]] == ["submitted", "held"]
