"""Queues created through the API carry scheduling plugins, limits and shares; a bad plugin
list is a 400 naming the plugin."""

from __future__ import annotations

from tests.api.conftest import Api


async def test_create_queue_with_scheduling(api: Api) -> None:
    created = await api.call(
        "POST",
        "/api/v1/queues",
        201,
        json={
            "name": "fair",
            "plugins": ["fairshare", "backfill"],
            "max_running": 10,
            "max_running_per_user": 2,
            "shares": {"alice": 3, "@physics": 1.5},
        },
    )
    assert created["plugins"] == ["fairshare", "backfill"]
    assert (created["max_running"], created["max_running_per_user"]) == (10, 2)
    assert created["shares"] == {"@physics": 1.5, "alice": 3.0}
    plain = await api.call("GET", "/api/v1/queues/normal", 200)
    assert (plain["plugins"], plain["max_running"], plain["shares"]) == ([], None, {})


async def test_unknown_or_clashing_plugins_are_refused(api: Api) -> None:
    body = await api.call(
        "POST", "/api/v1/queues", 400, json={"name": "bad", "plugins": ["fastest"]}
    )
    assert body["error"]["code"] == "invalid_request"
    assert "unknown scheduler plugin 'fastest'" in body["error"]["message"]
    body = await api.call(
        "POST", "/api/v1/queues", 400, json={"name": "bad", "plugins": ["pack", "spread"]}
    )
    assert "'pack' and 'spread' are both score plugins" in body["error"]["message"]
    await api.call("POST", "/api/v1/queues", 400, json={"name": "bad", "max_running": 0})
