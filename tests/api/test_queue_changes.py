"""Queues at run time: modify and delete through the API, durable as
events; the queue's per-job rules (users, maximums, defaults) applied at submit."""

from __future__ import annotations

from tests.api.conftest import Api, as_user


async def test_modify_changes_settings_and_keeps_the_switches(api: Api) -> None:
    await api.call("POST", "/api/v1/queues/short/close", 200)
    changed = await api.call(
        "PATCH",
        "/api/v1/queues/short",
        200,
        json={
            "priority": 70,
            "plugins": ["fairshare", "backfill"],
            "max_running": 5,
            "shares": {"alice": 3},
            "hosts": ["w1"],
            "max_walltime_s": 3600,
            "default_walltime_s": 600,
            "max_memory_mb": 4000,
            "max_slots": 4,
            "users": ["alice", "@physics"],
            "description": "short jobs",
        },
    )
    assert changed["priority"] == 70 and changed["open"] is False  # still closed
    assert changed["plugins"] == ["fairshare", "backfill"] and changed["max_slots"] == 4
    assert changed["users"] == ["alice", "@physics"] and changed["hosts"] == ["w1"]
    cleared = await api.call(
        "PATCH",
        "/api/v1/queues/short",
        200,
        json={"max_walltime_s": None, "default_walltime_s": None},
    )
    assert cleared["max_walltime_s"] is None and cleared["max_slots"] == 4
    listed = {q["name"]: q for q in (await api.call("GET", "/api/v1/queues", 200))["queues"]}
    assert listed["short"]["max_running"] == 5 and listed["short"]["max_memory_mb"] == 4000


async def test_bad_changes_are_refused_with_the_field_named(api: Api) -> None:
    cases = [
        ({"name": "other"}, "name is not a known field"),
        ({"open": True}, "open is not a known field"),
        ({"plugins": ["fairshare", "fcfs"]}, "plugins"),
        ({"plugins": ["nosuch"]}, "nosuch"),
        ({"default_walltime_s": 100, "max_walltime_s": 10}, "above max_walltime_s"),
        ({"max_slots": 0}, "max_slots"),
        ({"users": ["bad name"]}, "users[0]"),
        ({}, "at least 1"),
    ]
    before = api.service.state.queues["normal"]
    for body, expected in cases:
        answer = await api.call("PATCH", "/api/v1/queues/normal", 400, json=body)
        assert expected in answer["error"]["message"], (body, answer)
    assert api.service.state.queues["normal"] == before
    await api.call("PATCH", "/api/v1/queues/nosuch", 404, json={"priority": 1})
    user = as_user("alice", "user")
    await api.call("PATCH", "/api/v1/queues/normal", 403, json={"priority": 1}, headers=user)
    await api.call("DELETE", "/api/v1/queues/short", 403, headers=user)


async def test_delete_only_without_live_jobs_and_never_the_default(api: Api) -> None:
    job = await api.submit(queue="short", hold=True)
    answer = await api.call("DELETE", "/api/v1/queues/short", 409)
    assert "still has 1 pending, running or suspended" in answer["error"]["message"]
    await api.call("POST", f"/api/v1/jobs/{job}/kill", 200)
    assert (await api.call("DELETE", "/api/v1/queues/short", 200)) == {"deleted": "short"}
    assert "short" not in api.service.state.queues
    assert (await api.show(job))["queue"] == "short"  # a finished job keeps its queue's name
    answer = await api.call("POST", f"/api/v1/jobs/{job}/requeue", 409)
    assert "has been deleted" in answer["error"]["message"]
    await api.call("POST", "/api/v1/jobs", 400, json={"command": "true", "queue": "short"})
    answer = await api.call("DELETE", "/api/v1/queues/normal", 409)
    assert "default queue" in answer["error"]["message"]
    await api.call("DELETE", "/api/v1/queues/short", 404)


async def test_the_queues_rules_apply_at_submit(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/queues",
        201,
        json={
            "name": "limited",
            "default_walltime_s": 600,
            "max_walltime_s": 3600,
            "default_memory_mb": 500,
            "max_memory_mb": 2000,
            "max_slots": 2,
            "users": ["admin", "@physics"],
        },
    )
    job = await api.submit(queue="limited")
    shown = await api.show(job)
    assert shown["walltime_s"] == 600 and shown["memory_mb"] == 500
    for body, expected in [
        ({"walltime_s": 3601}, "at most 3600 s"),
        ({"memory_mb": 2001}, "at most 2000 MB"),
        ({"slots": 3}, "at most 2 per job"),
    ]:
        answer = await api.call(
            "POST", "/api/v1/jobs", 400, json={"command": "true", "queue": "limited", **body}
        )
        assert expected in answer["error"]["message"]
    answer = await api.call(
        "POST",
        "/api/v1/jobs",
        403,
        json={"command": "true", "queue": "limited"},
        headers=as_user("bob", "user"),
    )
    assert "may not submit to queue 'limited'" in answer["error"]["message"]
    await api.call(
        "PATCH",
        "/api/v1/queues/limited",
        200,
        json={"max_walltime_s": None, "default_walltime_s": None},
    )
    assert (await api.show(await api.submit(queue="limited")))["walltime_s"] is None
    assert (await api.show(job))["walltime_s"] == 600  # jobs keep what they came with
