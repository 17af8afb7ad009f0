"""Idempotent submits: `Idempotency-Key` on POST /api/v1/jobs.

A client that lost the answer (the primary failed, the connection dropped) sends the same
request with the same key again; it gets the first job back instead of a second one. The key
is part of the replicated job record, so this holds across a failover too (tested with real
processes in tests/integration/test_ha.py).
"""

from __future__ import annotations

import asyncio

from xce.core.state import ClusterState

from .conftest import Api

JOBS = "/api/v1/jobs"


async def post(api: Api, key: str | None, status: int = 201, **body: object) -> object:
    body.setdefault("command", "echo hi")
    resp = await api.client.post(JOBS, json=body, headers={"Idempotency-Key": key} if key else {})
    data = await resp.json()
    assert resp.status == status, data
    return resp, data


async def test_a_repeated_key_returns_the_first_job(api: Api) -> None:
    first, a = await post(api, "k-1", name="once")
    again, b = await post(api, "k-1", name="once")
    assert a == b and "Idempotent-Replayed" not in first.headers  # type: ignore[attr-defined]
    assert again.headers["Idempotent-Replayed"] == "true"  # type: ignore[attr-defined]
    _, other = await post(api, "k-2", name="once")
    _, plain = await post(api, None, name="once")
    jobs = (await api.call("GET", JOBS, 200))["jobs"]
    assert len(jobs) == 3 and len({a["job_id"], other["job_id"], plain["job_id"]}) == 3


async def test_concurrent_twins_make_one_job(api: Api) -> None:
    answers = await asyncio.gather(*(post(api, "twin", name="twin") for _ in range(8)))
    assert len({data["job_id"] for _, data in answers}) == 1  # type: ignore[index]
    assert len((await api.call("GET", JOBS, 200))["jobs"]) == 1


async def test_a_key_reused_for_another_job_is_refused(api: Api) -> None:
    await post(api, "k", name="first")
    _, error = await post(api, "k", 409, name="second")
    assert "Idempotency-Key" in error["error"]["message"]  # type: ignore[index]
    await post(api, "bad key with spaces", 400)


async def test_keys_are_state_that_replays_and_checkpoints(api: Api) -> None:
    from xce.core.model import JobRecord
    from xce.store.checkpoint import copy_state
    from xce.wire.plain import pack_records, unpack_records

    _, data = await post(api, "k-replay", name="kept")
    job_id = data["job_id"]  # type: ignore[index]
    state = api.service.state
    assert state.submit_keys[("admin", "k-replay")] == job_id
    copy = copy_state(state, 1)
    jobs = unpack_records(JobRecord, pack_records(copy.jobs))
    restored = ClusterState.restore(jobs, copy.arrays, copy.queues, copy.hosts, copy.next_number)
    assert restored.submit_keys == state.submit_keys
