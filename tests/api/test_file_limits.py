"""Limits that fit HPC data: decided from Content-Length before a body is read, a bounded
number of transfers at once that never holds other requests, and outputs a worker could not
return shown on the job.

The "before the body is read" tests speak HTTP on a raw socket: they send the headers of a
huge body and no body at all, so an answer can only come from the headers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from xce.api.transfers import TRANSFERS

from .conftest import Api, as_user, hold_the_transfer_slot, make_settings, start_api

ADMIN = as_user("root", "admin")
HUGE = 2**50  # a petabyte: no test machine's disk or quota


async def raw_request(
    api: Api, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """Send a request by hand (headers as given, then `body`, maybe far short of its
    Content-Length) and read the answer; the connection stays open, so an answer that
    waited for the rest of the body would never come (a minute's bound on the wait, for
    liveness only: the test asserts nothing about time)."""
    return await asyncio.wait_for(_exchange(api, method, path, headers, body), 60)


async def _exchange(
    api: Api, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {server.host}"]
        lines += [f"{k}: {v}" for k, v in {**ADMIN, **headers}.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        status = int(status_line.split()[1])
        answer: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            key, _, value = line.decode().partition(":")
            answer[key.strip().lower()] = value.strip()
        if status == 100:
            return status, answer, b""
        data = await reader.readexactly(int(answer.get("content-length", "0")))
        return status, answer, data
    finally:
        writer.close()


def _uncapped(api: Api) -> Api:
    """The product's default: no cap per file (the API tests' store has one of 10 MB)."""
    api.service.files.max_bytes = 0
    return api


def _no_partial_files(root: Path) -> None:
    leftovers = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".json")]
    assert leftovers == [], leftovers


async def test_an_upload_over_the_quota_is_refused_from_its_content_length(api: Api) -> None:
    files = _uncapped(api).service.files
    status, _, body = await raw_request(
        api,
        "POST",
        "/api/v1/uploads",
        {"Content-Length": str(HUGE), "Content-Type": "application/octet-stream"},
        b"only a few bytes of it",
    )
    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "too_large"
    message = error["message"]
    assert message.startswith("upload: 1024.0 TB ") and "\n" not in message
    assert "10.0 GB" in message and "upload_quota_mb" in message
    _no_partial_files(files.root / "uploads")
    assert files.usage("root") == 0


async def test_the_disk_reserve_refuses_from_content_length(api: Api) -> None:
    files = _uncapped(api).service.files
    files.quota_bytes = 2**62  # only the disk can refuse
    files.reserve_bytes = 1024 * 1024 * 1024
    status, _, body = await raw_request(
        api, "POST", "/api/v1/uploads", {"Content-Length": str(HUGE)}
    )
    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "too_large"
    assert error["message"].startswith("upload: 1024.0 TB would leave 0 bytes free")
    assert "min_free_disk_mb" in error["message"] and "1.0 GB" in error["message"]
    _no_partial_files(files.root / "uploads")
    assert files.room.promised == 0
    # A file that fits is stored, with the same reserve.
    assert (await api.call("POST", "/api/v1/uploads", 201, data=b"fits"))["size"] == 4


async def test_a_per_file_cap_when_one_is_set(api: Api) -> None:
    api.service.files.max_bytes = 1000
    status, _, body = await raw_request(api, "POST", "/api/v1/uploads", {"Content-Length": "1001"})
    assert status == 413
    message = json.loads(body)["error"]["message"]
    assert message == (
        "upload: 1001 bytes is over the limit of 1000 bytes per file ([controller] max_upload_mb)"
    )
    api.service.files.max_bytes = 0  # the default: no cap per file
    status, _, body = await raw_request(
        api, "POST", "/api/v1/uploads", {"Content-Length": "1001"}, b"y" * 1001
    )
    assert status == 201 and json.loads(body)["size"] == 1001


async def test_expect_continue_is_answered_only_after_the_checks(api: Api) -> None:
    """A client that waits for 100 Continue sends nothing of a refused file, and is told
    to go on only once its file was admitted."""
    status, _, body = await raw_request(
        api,
        "POST",
        "/api/v1/uploads",
        {"Content-Length": str(HUGE), "Expect": "100-continue"},
    )
    assert status == 413 and json.loads(body)["error"]["code"] == "too_large"
    status, _, _ = await raw_request(
        api, "POST", "/api/v1/uploads", {"Content-Length": "5", "Expect": "100-continue"}
    )
    assert status == 100


async def test_a_worker_output_over_the_jobs_limit_is_refused_before_reading(api: Api) -> None:
    _uncapped(api)
    job_id = await api.submit(outputs=["big.dat"])
    await api.register("w1")
    await api.service.schedule_once()
    path = f"/api/v1/workers/w1/jobs/{job_id}/outputs/big.dat?attempt=0&first=1"
    status, _, body = await raw_request(api, "PUT", path, {"Content-Length": str(HUGE)})
    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "too_large"
    assert error["message"].startswith(f"big.dat: 1024.0 TB would take the outputs of job {job_id}")
    assert "max_job_outputs_mb" in error["message"]
    assert (await api.call("GET", f"/api/v1/jobs/{job_id}/files", 200))["files"] == []
    # The refused file counts for nothing: one that fits is taken.
    await api.call("PUT", path.replace("big.dat", "small.dat"), 201, data=b"ok")


async def test_a_body_of_unknown_length_is_cut_off_at_the_limit(api: Api) -> None:
    files = _uncapped(api).service.files
    files.quota_bytes = 3 * 1024 * 1024
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1000):  # 64 MB if nothing stopped it
            sent += 65536
            yield b"z" * 65536

    resp = await api.client.post("/api/v1/uploads", data=endless())
    assert resp.status == 413
    error = (await resp.json())["error"]
    # Cut at the first piece past the limit: what had arrived by then, more than the limit
    # (named to one decimal: a piece of a few KiB past 3 MiB reads "more than 3.0 MB").
    arrived = re.match(r"upload: more than ([0-9.]+) MB would take", error["message"])
    assert error["code"] == "too_large" and arrived and float(arrived.group(1)) >= 3.0
    assert sent > files.quota_bytes
    assert "upload_quota_mb" in error["message"]
    _no_partial_files(files.root / "uploads")
    assert files.usage("root") == 0


async def test_busy_transfers_answer_503_while_other_requests_go_on(tmp_path: Path) -> None:
    api, client = await start_api(
        make_settings(tmp_path, max_concurrent_transfers=1, transfer_wait_s=0.2),
        tmp_path,
        ADMIN,
    )
    try:
        job_id = await api.submit(outputs=["o"])
        await api.register("w1")
        await api.service.schedule_once()
        base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
        await api.call("PUT", f"{base}/o?attempt=0&first=1", 201, data=b"out")
        holder, release = await hold_the_transfer_slot(api, client)

        for method, path, kwargs in (
            ("POST", "/api/v1/uploads", {"data": b"second"}),
            ("GET", f"/api/v1/jobs/{job_id}/files/o", {}),
            ("PUT", f"{base}/p?attempt=0", {"data": b"x"}),
            ("GET", f"/api/v1/workers/w1/jobs/{job_id}/inputs/none?attempt=0", {}),
        ):
            resp = await client.request(method, path, **kwargs)
            body = await resp.json()
            if resp.status == 404:  # no such input: refused before any slot is asked for
                continue
            assert resp.status == 503, (method, path, body)
            assert body["error"]["code"] == "busy"
            assert "max_concurrent_transfers" in body["error"]["message"]
            assert int(resp.headers["Retry-After"]) >= 1
        # Nothing else waits for a transfer slot.
        assert (await client.get("/healthz")).status == 200
        assert (await api.call("GET", "/api/v1/jobs", 200))["total"] == 1
        beat: dict[str, Any] = {"running": [{"job_id": job_id, "attempt": 0}]}
        await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json=beat)
        done = {"attempt": 0, "exit_code": 0, "outputs": ["o"]}
        finished = await api.call(
            "POST", f"/api/v1/workers/w1/jobs/{job_id}/finished", 200, json=done
        )
        assert finished["accepted"] is True

        release.set()
        resp = await holder
        stored = await resp.json()
        assert resp.status == 201
        assert stored["sha256"] == hashlib.sha256(b"first part, last part").hexdigest()
        assert api.app[TRANSFERS].in_use == 0
        await api.call("POST", "/api/v1/uploads", 201, data=b"now there is room")
    finally:
        await client.close()


async def test_outputs_not_returned_show_on_the_job(api: Api) -> None:
    job_id = await api.submit(outputs=["*.dat"])
    await api.register("w1")
    await api.service.schedule_once()
    problems = [
        "big.dat: 20.0 GB would take the outputs over the limit of 10.0 GB per job "
        "([controller] max_job_outputs_mb)",
        "b.dat: a file and a directory of one name",
    ]
    body = {"attempt": 0, "exit_code": 0, "outputs": [], "output_problems": problems}
    await api.call("POST", f"/api/v1/workers/w1/jobs/{job_id}/finished", 200, json=body)
    shown = await api.show(job_id)
    assert shown["state"] == "DONE"  # the program succeeded; its files are what is missing
    assert shown["reason"].startswith("2 outputs not returned: big.dat: 20.0 GB")
    assert shown["output_problems"] == problems
    listed = await api.call("GET", "/api/v1/jobs", 200)
    assert "2 outputs not returned" in listed["jobs"][0]["reason"]
    history = [e["detail"] for e in shown["history"] if e["event"] == "finished"]
    assert history and "outputs not returned" in history[0]

    # With a reason of its own, the reason keeps it and adds the outputs.
    second = await api.submit()
    await api.service.schedule_once()
    body = {
        "attempt": 0,
        "exit_code": None,
        "exit_signal": 9,
        "reason": "walltime exceeded",
        "output_problems": ["stdout: unreadable"],
    }
    await api.call("POST", f"/api/v1/workers/w1/jobs/{second}/finished", 200, json=body)
    shown = await api.show(second)
    assert shown["state"] == "EXIT"
    assert shown["reason"] == "walltime exceeded; 1 output not returned: stdout: unreadable"


async def test_output_problems_are_bounded(api: Api) -> None:
    job_id = await api.submit()
    await api.register("w1")
    await api.service.schedule_once()
    url = f"/api/v1/workers/w1/jobs/{job_id}/finished"
    for problems in (["x"] * 1001, ["y" * 1025]):
        body = {"attempt": 0, "exit_code": 0, "output_problems": problems}
        error = await api.call("POST", url, 400, json=body)
        assert "output_problems" in error["error"]["message"]
    assert (await api.show(job_id))["state"] == "RUN"
