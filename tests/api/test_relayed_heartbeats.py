"""`POST /api/v1/workers/heartbeats`: a relay's batch of many hosts' heartbeats, each host
checked by its own token and answered in its own entry, as if it had come alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from xce.core import events as ev
from xce.protocol.worker import RELAY_BATCH_MAX

from .conftest import ISSUER, TOKENS, Api, Clock, as_user, make_settings, start_api


def _host_token(host: str) -> str:
    """A worker service token bound to `host`, as `xce token worker` mints them."""
    return ISSUER.issue(f"worker-{host}", (), ("worker",), "service", host=host)[0]


@pytest.fixture
async def ctl(tmp_path: Path) -> AsyncIterator[tuple[Api, Clock]]:
    api, client = await start_api(make_settings(tmp_path), tmp_path, as_user("root", "admin"))
    clock = Clock()
    api.service.clock = clock
    try:
        yield api, clock
    finally:
        await client.close()


def _entry(host: str, token: str | None = None, **heartbeat: Any) -> dict[str, Any]:
    return {"host": host, "token": token or _host_token(host), "heartbeat": heartbeat}


async def _relay(api: Api, entries: list[dict[str, Any]], status: int = 200) -> Any:
    """The batch as the relay on host "r1" sends it, with its own bound token."""
    headers = {"Authorization": f"Bearer {_host_token('r1')}"}
    body = {"heartbeats": entries}
    return await api.call("POST", "/api/v1/workers/heartbeats", status, json=body, headers=headers)


async def test_each_relayed_host_is_heard_and_answered_in_order(ctl) -> None:
    api, clock = ctl
    for host in ("a", "b", "c"):
        await api.register(host)
    clock.now += 4
    answer = await _relay(api, [_entry("c"), _entry("a", load={"load1": 0.5}), _entry("b")])
    assert [a["host"] for a in answer["answers"]] == ["c", "a", "b"]
    for entry in answer["answers"]:
        assert entry["status"] == 200
        # what the host's own heartbeat would have been answered
        assert set(entry["answer"]) == {"version", "register_again", "heartbeat_interval_s"}
        assert api.gateway.heard[entry["host"]] == clock.now
    assert api.gateway.load["a"] == {"load1": 0.5}
    assert "r1" not in api.gateway.heard  # the relay speaks for the others, not itself


async def test_a_host_with_a_bad_word_is_refused_alone(ctl) -> None:
    """A forged or foreign token refuses its own entry, with the status the host's own
    request would have had, and leaves that host unheard; the rest of the batch is taken."""
    api, clock = ctl
    for host in ("a", "b", "c", "d"):
        await api.register(host)
    clock.now += 4
    forged = _host_token("b")[:-4] + "AAAA"
    answer = await _relay(
        api,
        [
            _entry("a"),
            _entry("b", forged),
            _entry("c", _host_token("a")),  # a's token speaking for c
            _entry("d", TOKENS["user"]),  # a user's token is no worker's
        ],
    )
    statuses = {a["host"]: a["status"] for a in answer["answers"]}
    assert statuses == {"a": 200, "b": 401, "c": 403, "d": 403}
    assert "bound to host a, not c" in answer["answers"][2]["error"]["message"]
    assert api.gateway.heard["a"] == clock.now
    assert all(api.gateway.heard[h] < clock.now for h in ("b", "c", "d"))


async def test_an_unregistered_host_is_refused_alone(ctl) -> None:
    api, _ = ctl
    await api.register("a")
    answer = await _relay(api, [_entry("ghost"), _entry("a")])
    assert [a["status"] for a in answer["answers"]] == [404, 200]
    assert answer["answers"][0]["error"]["code"] == "not_found"


async def test_a_relayed_report_of_a_running_job_counts_as_the_hosts_own(ctl) -> None:
    """Usage in a relayed heartbeat reaches the job as a direct heartbeat's does; a host's
    unreachable mark is lifted by its relayed heartbeat."""
    api, clock = ctl
    await api.register("a")
    job = await api.submit(command="sleep 100")
    await api.service.schedule_once()
    assert api.service.state.jobs[job].host == "a"
    await api.service.commit([ev.HostUnavailable(clock.now, "a")])
    clock.now += 60
    report = {"job_id": job, "attempt": 0, "cpu_user_s": 12.5, "wall_time_s": 60.0}
    answer = await _relay(api, [_entry("a", running=[report])])
    assert answer["answers"][0]["status"] == 200
    assert api.service.state.hosts["a"].reachable
    assert api.service.state.jobs[job].usage.cpu_user_s == 12.5


async def test_the_relay_itself_needs_a_worker_token(ctl) -> None:
    api, _ = ctl
    await api.register("a")
    body = {"heartbeats": [_entry("a")]}
    headers = {"Authorization": f"Bearer {TOKENS['user']}"}
    await api.call("POST", "/api/v1/workers/heartbeats", 403, json=body, headers=headers)


@pytest.mark.parametrize(
    "body",
    [
        {"heartbeats": []},
        {"heartbeats": [{"host": "a", "heartbeat": {}}]},
        {"heartbeats": [{"host": "a", "token": "", "heartbeat": {}}]},
        {"heartbeats": [{"host": "a b", "token": "t", "heartbeat": {}}]},
        {"heartbeats": [{"host": "a", "token": "t", "heartbeat": {"load": {"x": "y"}}}]},
        {"heartbeats": [{"host": "a", "token": "t", "heartbeat": {}}] * (RELAY_BATCH_MAX + 1)},
    ],
    ids=["empty", "no-token", "empty-token", "bad-host", "bad-heartbeat", "too-many"],
)
async def test_a_malformed_batch_is_refused_whole_and_changes_nothing(ctl, body) -> None:
    api, clock = ctl
    await api.register("a")
    heard = dict(api.gateway.heard)
    clock.now += 4
    headers = {"Authorization": f"Bearer {_host_token('r1')}"}
    error = await api.call("POST", "/api/v1/workers/heartbeats", 400, json=body, headers=headers)
    assert error["error"]["code"] == "invalid_request"
    assert api.gateway.heard == heard
