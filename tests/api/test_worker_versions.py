"""A worker's registration carries its build and protocol: the controller shows the build
per host and refuses, with one line naming both, a worker of a newer protocol or outside
the skew rule (xce/core/versions.py), before it judges the body's fields."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from xce import __version__
from xce.cli.hosts import readable_host
from xce.core.versions import WORKER_PROTOCOL, release_tuple

BODY = {"host": "w1", "slots": 2, "memory_mb": 100}


def release(minor_delta: int, major_delta: int = 0) -> str:
    found = release_tuple(__version__)
    assert found is not None
    major, minor, _ = found
    return f"{major + major_delta}.{max(minor + minor_delta, 0)}.0"


async def test_the_workers_build_is_shown_per_host(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/workers/register",
        200,
        json={**BODY, "release": __version__, "protocol": WORKER_PROTOCOL},
    )
    await api.register("old")  # a worker from before versions were sent
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["worker_version"] == __version__
    assert readable_host(host)["worker_version"] == __version__
    old = await api.call("GET", "/api/v1/hosts/old", 200)
    assert old["worker_version"] is None
    assert readable_host(old)["worker_version"].startswith("unknown")
    cluster = await api.call("GET", "/api/v1/cluster", 200)
    assert cluster["version"] == __version__
    assert cluster["formats"]["worker_protocol"] == WORKER_PROTOCOL


async def test_a_newer_protocol_is_refused_by_its_versions_not_its_fields(api: Api) -> None:
    """A newer worker sends fields this build does not know: the answer names the
    versions (409 version_skew), not the first unknown field (a 400 it would exit on)."""
    body: dict[str, Any] = {
        **BODY,
        "release": release(+1),
        "protocol": WORKER_PROTOCOL + 1,
        "a_field_from_the_future": {"x": 1},
    }
    answer = await api.call("POST", "/api/v1/workers/register", 409, json=body)
    error = answer["error"]
    assert error["code"] == "version_skew"
    assert f"worker protocol {WORKER_PROTOCOL + 1}" in error["message"]
    assert f"knows ≤ {WORKER_PROTOCOL}" in error["message"] and __version__ in error["message"]
    assert (await api.call("GET", "/api/v1/hosts", 200))["hosts"] == []


@pytest.mark.parametrize(
    ("theirs", "allowed"),
    [
        (release(0), True),
        (release(-1), True),  # one minor older: inside the window
        (release(-2), False),
        (release(+1), False),  # never newer: workers are upgraded last
        (release(0, major_delta=1), False),
    ],
)
async def test_the_skew_rule_is_enforced_at_registration(
    api: Api, theirs: str, allowed: bool
) -> None:
    body = {**BODY, "release": theirs, "protocol": WORKER_PROTOCOL}
    answer = await api.call("POST", "/api/v1/workers/register", 200 if allowed else 409, json=body)
    if not allowed:
        assert answer["error"]["code"] == "version_skew"
        assert theirs in answer["error"]["message"] and __version__ in answer["error"]["message"]
