"""`POST /api/v1/workers/heartbeats`: a relay's batch of many hosts' heartbeats, each signed
with the relay key its host's registration got, checked and numbered per host, taken as if
it had come alone and answered in its own entry with a proof the host can check."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from xce.api.auth import AUTH
from xce.core import events as ev
from xce.protocol.relay_keys import answer_proof, heartbeat_mac
from xce.protocol.worker import RELAY_BATCH_MAX, RELAY_HEARTBEAT_MAX

from .conftest import TOKENS, Api, Clock, clocked_api, make_settings, token_for


@pytest.fixture
async def ctl(tmp_path: Path) -> AsyncIterator[tuple[Api, Clock]]:
    async with clocked_api(tmp_path, make_settings(tmp_path)) as running:
        yield running


async def _key(api: Api, host: str) -> bytes:
    """Register `host` as its worker does and keep the relay key the answer holds."""
    return bytes.fromhex((await api.register(host))["relay_key"])


def _entry(host: str, key: bytes, seq: int = 1, **heartbeat: Any) -> dict[str, Any]:
    text = json.dumps(heartbeat)
    return {"host": host, "seq": seq, "heartbeat": text, "mac": heartbeat_mac(key, host, seq, text)}


async def _relay(api: Api, entries: list[dict[str, Any]], status: int = 200) -> Any:
    """The batch as a relay sends it, with a worker's token of its own."""
    headers = {"Authorization": f"Bearer {TOKENS['worker']}"}
    body = {"heartbeats": entries}
    return await api.call("POST", "/api/v1/workers/heartbeats", status, json=body, headers=headers)


async def test_each_relayed_host_is_heard_and_answered_with_a_proof(ctl) -> None:
    api, clock = ctl
    keys = {host: await _key(api, host) for host in ("a", "b", "c")}
    clock.now += 4
    entries = [_entry("c", keys["c"]), _entry("a", keys["a"], 7, load={"load1": 0.5})]
    entries.append(_entry("b", keys["b"]))
    answer = await _relay(api, entries)
    assert [a["host"] for a in answer["answers"]] == ["c", "a", "b"]
    for item, sent in zip(answer["answers"], entries, strict=True):
        host = item["host"]
        assert item["status"] == 200
        # what the host's own heartbeat would have been answered, proven under its key
        assert set(item["answer"]) == {"version", "register_again", "heartbeat_interval_s"}
        assert item["proof"] == answer_proof(keys[host], host, sent["seq"], item["answer"])
        assert api.gateway.heard[host] == clock.now
    assert api.gateway.load["a"] == {"load1": 0.5}


async def test_a_heartbeat_a_relay_forged_or_played_again_is_refused_alone(ctl) -> None:
    """The relay holds no key: a heartbeat it makes up or alters fails its MAC, one it
    recorded is refused by its number; each refusal is its entry's alone, without proof,
    and leaves that host unheard."""
    api, clock = ctl
    keys = {host: await _key(api, host) for host in ("a", "b", "c", "d")}
    await _relay(api, [_entry("d", keys["d"], 5)])
    clock.now += 4
    altered = _entry("b", keys["b"], 1, load={"load1": 0.5})
    altered["heartbeat"] = json.dumps({"load": {"load1": 99.0}})
    answer = await _relay(
        api,
        [
            _entry("a", keys["a"]),
            altered,
            _entry("c", keys["a"]),  # a's key signing for c
            _entry("d", keys["d"], 5),  # played again
        ],
    )
    statuses = {a["host"]: a["status"] for a in answer["answers"]}
    assert statuses == {"a": 200, "b": 401, "c": 401, "d": 409}
    assert all("proof" not in a for a in answer["answers"][1:])
    assert "taken already" in answer["answers"][3]["error"]["message"]
    assert api.gateway.heard["a"] == clock.now
    assert all(api.gateway.heard[h] < clock.now for h in ("b", "c", "d"))
    assert api.gateway.load.get("b") != {"load1": 99.0}


async def test_a_new_registration_retires_the_old_key(ctl) -> None:
    api, _ = ctl
    old = await _key(api, "a")
    new = await _key(api, "a")
    answer = await _relay(api, [_entry("a", old), _entry("a", new)])
    assert [a["status"] for a in answer["answers"]] == [401, 200]


async def _key_as(api: Api, host: str, token: str) -> bytes:
    """Register `host` with a worker token of its own."""
    body = {"host": host, "slots": 4, "memory_mb": 8000}
    headers = {"Authorization": f"Bearer {token}"}
    answer = await api.call("POST", "/api/v1/workers/register", 200, json=body, headers=headers)
    return bytes.fromhex(answer["relay_key"])


async def test_a_key_ends_with_the_token_its_host_registered_with(ctl, monkeypatch) -> None:
    """A revoked worker token ends the relayed heartbeats of the hosts that registered
    with it, as it ends their direct ones (the relay's own token is another): refused
    alone, naming the revocation, until the worker registers again with a new token. An
    expired token ends them too."""
    api, _ = ctl
    first = token_for("wa", ("worker",), kind="service")
    keys = {"a": await _key_as(api, "a", first), "b": await _key_as(api, "b", TOKENS["worker"])}
    api.app[AUTH].tokens.revocations.revoke("wa")
    answer = await _relay(api, [_entry("a", keys["a"]), _entry("b", keys["b"])])
    assert [a["status"] for a in answer["answers"]] == [401, 200]
    assert "tokens of wa" in answer["answers"][0]["error"]["message"]
    assert "revoked" in answer["answers"][0]["error"]["message"]
    assert "proof" not in answer["answers"][0]
    # the revoked token cannot register again; a new one can, and its key is taken
    body = {"host": "a", "slots": 4, "memory_mb": 8000}
    await api.call(
        "POST",
        "/api/v1/workers/register",
        401,
        json=body,
        headers={"Authorization": f"Bearer {first}"},
    )
    time.sleep(0.002)  # issued after the revocation's millisecond
    keys["a"] = await _key_as(api, "a", token_for("wa", ("worker",), kind="service"))
    answer = await _relay(api, [_entry("a", keys["a"], 2)])
    assert [a["status"] for a in answer["answers"]] == [200]
    # a day and more later every token of the run has expired
    later = time.time() + 2 * 86400
    monkeypatch.setattr("xce.controller.workers.time.time", lambda: later)
    answer = await _relay(api, [_entry("a", keys["a"], 3), _entry("b", keys["b"], 2)])
    assert [a["status"] for a in answer["answers"]] == [401, 401]
    assert all("expired" in a["error"]["message"] for a in answer["answers"])


async def test_a_host_without_a_key_here_is_told_to_register(ctl) -> None:
    """A controller that restarted or took over holds no keys: its hosts must register
    (straight to it) again; an unknown host is refused the same way."""
    api, _ = ctl
    key = await _key(api, "a")
    api.gateway.relay_keys.clear()  # as after a restart
    answer = await _relay(api, [_entry("a", key), _entry("ghost", key)])
    assert [a["status"] for a in answer["answers"]] == [409, 409]
    assert "must register again" in answer["answers"][0]["error"]["message"]


async def test_a_signed_heartbeat_that_is_not_one_is_refused_alone(ctl) -> None:
    api, _ = ctl
    keys = {host: await _key(api, host) for host in ("a", "b")}
    text = '{"load": {"x": "y"}}'
    bad = {"host": "a", "seq": 1, "heartbeat": text, "mac": heartbeat_mac(keys["a"], "a", 1, text)}
    answer = await _relay(api, [bad, _entry("b", keys["b"])])
    assert [a["status"] for a in answer["answers"]] == [400, 200]
    assert answer["answers"][0]["error"]["code"] == "invalid_request"


async def test_a_relayed_report_of_a_running_job_counts_as_the_hosts_own(ctl) -> None:
    """Usage in a relayed heartbeat reaches the job as a direct heartbeat's does; a host's
    unreachable mark is lifted by its relayed heartbeat."""
    api, clock = ctl
    key = await _key(api, "a")
    job = await api.submit(command="sleep 100")
    await api.service.schedule_once()
    assert api.service.state.jobs[job].host == "a"
    await api.service.commit([ev.HostUnavailable(clock.now, "a")])
    clock.now += 60
    report = {"job_id": job, "attempt": 0, "cpu_user_s": 12.5, "wall_time_s": 60.0}
    answer = await _relay(api, [_entry("a", key, running=[report])])
    assert answer["answers"][0]["status"] == 200
    assert api.service.state.hosts["a"].reachable
    usage = api.service.state.jobs[job].usage
    assert usage is not None and usage.cpu_user_s == 12.5


async def test_the_relay_itself_needs_a_worker_token(ctl) -> None:
    api, _ = ctl
    key = await _key(api, "a")
    body = {"heartbeats": [_entry("a", key)]}
    headers = {"Authorization": f"Bearer {TOKENS['user']}"}
    await api.call("POST", "/api/v1/workers/heartbeats", 403, json=body, headers=headers)
    assert api.gateway.relay_keys["a"][1] == 0  # nothing of it taken


def _raw(host: str = "a", seq: int = 1, heartbeat: str = "{}", mac: str = "0" * 64) -> Any:
    return {"host": host, "seq": seq, "heartbeat": heartbeat, "mac": mac}


@pytest.mark.parametrize(
    "body",
    [
        {"heartbeats": []},
        {"heartbeats": [{"host": "a", "seq": 1, "heartbeat": "{}"}]},
        {"heartbeats": [_raw(mac="zz")]},
        {"heartbeats": [_raw(seq=0)]},
        {"heartbeats": [_raw(host="a b")]},
        {"heartbeats": [_raw(heartbeat="x" * (RELAY_HEARTBEAT_MAX + 1))]},
        {"heartbeats": [{**_raw(), "token": "t"}]},
        {"heartbeats": [_raw()] * (RELAY_BATCH_MAX + 1)},
    ],
    ids=["empty", "no-mac", "bad-mac", "seq-0", "bad-host", "too-long", "unknown", "too-many"],
)
async def test_a_malformed_batch_is_refused_whole_and_changes_nothing(ctl, body) -> None:
    api, clock = ctl
    await _key(api, "a")
    heard = dict(api.gateway.heard)
    clock.now += 4
    headers = {"Authorization": f"Bearer {TOKENS['worker']}"}
    error = await api.call("POST", "/api/v1/workers/heartbeats", 400, json=body, headers=headers)
    assert error["error"]["code"] == "invalid_request"
    assert api.gateway.heard == heard
