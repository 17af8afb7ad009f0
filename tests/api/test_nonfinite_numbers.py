"""Numbers too large for a double (`1e400` reads as infinity) in bodies whose values are
kept and shown: each is a 400 naming the field, and nothing is stored. Accepted, the value
went into the queue or host record and every later listing of queues or hosts failed
(JSON has no infinity), for every user, until the record was replaced."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api

JSON = {"Content-Type": "application/json"}


async def _post(api: Api, method: str, path: str, raw: bytes) -> tuple[int, str]:
    resp = await api.client.request(method, path, data=raw, headers=JSON)
    body = await resp.json()
    return resp.status, body.get("error", {}).get("message", "")


@pytest.mark.parametrize("share", [b"1e400", b"1e300"])
async def test_a_queue_share_beyond_any_weight_is_refused(api: Api, share: bytes) -> None:
    status, message = await _post(
        api, "POST", "/api/v1/queues", b'{"name": "fs", "shares": {"alice": ' + share + b"}}"
    )
    assert status == 400 and "body.shares.alice" in message, message
    assert "fs" not in api.service.state.queues
    status, message = await _post(
        api, "PATCH", "/api/v1/queues/normal", b'{"shares": {"alice": ' + share + b"}}"
    )
    assert status == 400 and "body.shares.alice" in message, message
    await api.call("GET", "/api/v1/queues", 200)
    await api.call("GET", "/api/v1/queues/normal", 200)


async def test_queue_shares_within_bounds_are_kept() -> None:
    """The bound leaves every share a site sets (weights, percentages, core counts)."""
    from xce.protocol.admin import QueueCreate
    from xce.protocol.decoding import convert

    body = convert({"name": "fs", "shares": {"a": 0.5, "b": 100, "c": 2**40}}, QueueCreate)
    assert body.shares == {"a": 0.5, "b": 100.0, "c": float(2**40)}


@pytest.mark.parametrize("value", [b"1e400", b"-1e400"])
async def test_a_worker_cannot_make_the_host_listing_unanswerable(api: Api, value: bytes) -> None:
    await api.register()
    status, message = await _post(
        api,
        "POST",
        "/api/v1/workers/register",
        b'{"host": "w1", "slots": 1, "memory_mb": 10, "containment": {"cores": ' + value + b"}}",
    )
    assert status == 400 and "body.containment.cores" in message, message
    status, message = await _post(
        api, "POST", "/api/v1/workers/w1/heartbeat", b'{"load": {"load1": ' + value + b"}}"
    )
    assert status == 400 and "body.load.load1" in message, message
    await api.call("GET", "/api/v1/hosts", 200)
    await api.call("GET", "/api/v1/hosts/w1", 200)


async def test_ordinary_load_and_containment_numbers_are_kept(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/workers/register",
        200,
        json={"host": "w1", "slots": 1, "memory_mb": 10, "containment": {"cores": 2.5}},
    )
    body = {"load": {"load1": 0.25, "load5": 1e6}}
    await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json=body)
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["containment"]["cores"] == 2.5, host
