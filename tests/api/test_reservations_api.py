"""Advance reservations through the API: RBAC (admins and operators create and delete,
users list), 4xx with the problem named, jobs that target one, the reason of a job a
maintenance window keeps waiting, and the event stream."""

from __future__ import annotations

import asyncio

from tests.api.conftest import Api, as_user

USER = as_user("alice", "user")
OPERATOR = as_user("olga", "operator")


async def test_create_list_show_delete_and_rbac(api: Api) -> None:
    await api.register("w1")
    now = api.service.clock()
    body = {
        "name": "maint",
        "hosts": ["w1"],
        "start": now + 3600,
        "duration_s": 600,
        "maintenance": True,
        "description": "firmware",
    }
    await api.call("POST", "/api/v1/reservations", 403, json=body, headers=USER)
    made = await api.call("POST", "/api/v1/reservations", 201, json=body, headers=OPERATOR)
    assert made["end"] == now + 4200 and made["state"] == "waiting"
    assert made["created_by"] == "olga" and made["slots"] is None
    listed = await api.call("GET", "/api/v1/reservations", 200, headers=USER)
    assert [r["name"] for r in listed["reservations"]] == ["maint"]
    assert (await api.call("GET", "/api/v1/reservations/maint", 200, headers=USER))[
        "description"
    ] == "firmware"
    await api.call("DELETE", "/api/v1/reservations/maint", 403, headers=USER)
    assert await api.call("DELETE", "/api/v1/reservations/maint", 200) == {"deleted": "maint"}
    await api.call("DELETE", "/api/v1/reservations/maint", 404)
    await api.call("GET", "/api/v1/reservations/maint", 404)


async def test_bad_reservations_are_4xx_naming_the_problem(api: Api) -> None:
    await api.register("w1")
    now = api.service.clock()
    ok = {"name": "r", "hosts": ["w1"], "start": now, "end": now + 60, "users": ["alice"]}
    await api.call("POST", "/api/v1/reservations", 201, json=ok)
    cases = [
        ({**ok, "name": "r"}, 409, "already exists"),
        ({**ok, "name": "s"}, 409, "holds host w1"),
        ({**ok, "name": "s", "hosts": ["nohost"]}, 400, "'nohost' is not registered"),
        ({**ok, "name": "s", "end": now - 10}, 400, "end in the past"),
        ({**ok, "name": "s", "duration_s": 5}, 400, "exactly one of end and duration_s"),
        ({**ok, "name": "s", "users": []}, 400, "maintenance"),
        ({**ok, "name": "s", "users": ["x"], "maintenance": True}, 400, "nobody"),
        ({**ok, "name": "s", "flags": ["bogus"]}, 400, "flags"),
        ({**ok, "name": "bad name"}, 400, "name"),
        ({k: v for k, v in ok.items() if k != "hosts"} | {"name": "s"}, 400, "hosts"),
    ]
    for body, status, words in cases:
        answer = await api.call("POST", "/api/v1/reservations", status, json=body)
        assert words in answer["error"]["message"], (body, answer)
    assert set(api.service.state.reservations) == {"r"}
    overlapping = {**ok, "name": "s", "flags": ["overlap"]}
    await api.call("POST", "/api/v1/reservations", 201, json=overlapping)


async def test_jobs_target_reservations_they_may_use(api: Api) -> None:
    await api.register("w1")
    now = api.service.clock()
    await api.call(
        "POST",
        "/api/v1/reservations",
        201,
        json={
            "name": "team",
            "hosts": ["w1"],
            "start": now + 3600,
            "duration_s": 600,
            "users": ["alice"],
        },
    )
    await api.call(
        "POST",
        "/api/v1/reservations",
        201,
        json={
            "name": "maint",
            "hosts": ["w1"],
            "start": now + 7200,
            "duration_s": 600,
            "maintenance": True,
        },
    )
    job = (
        await api.call(
            "POST",
            "/api/v1/jobs",
            201,
            headers=USER,
            json={"command": "true", "reservation": "team"},
        )
    )["job_id"]
    bob = as_user("bob", "user")
    answer = await api.call(
        "POST", "/api/v1/jobs", 403, headers=bob, json={"command": "true", "reservation": "team"}
    )
    assert "may not use reservation team" in answer["error"]["message"]
    answer = await api.call(
        "POST", "/api/v1/jobs", 403, headers=USER, json={"command": "true", "reservation": "maint"}
    )
    assert "maintenance" in answer["error"]["message"]
    answer = await api.call(
        "POST", "/api/v1/jobs", 400, headers=USER, json={"command": "true", "reservation": "nope"}
    )
    assert "reservation 'nope' does not exist" in answer["error"]["message"]
    await api.service.schedule_once()
    shown = await api.call("GET", f"/api/v1/jobs/{job}", 200, headers=USER)
    assert shown["state"] == "PEND" and shown["reservation"] == "team"
    assert shown["reason"].startswith("waiting for reservation team to start at ")


async def test_a_maintenance_window_keeps_a_long_job_waiting_a_short_one_runs(api: Api) -> None:
    await api.register("w1")
    now = api.service.clock()
    await api.call(
        "POST",
        "/api/v1/reservations",
        201,
        json={
            "name": "maint",
            "hosts": ["w1"],
            "start": now + 600,
            "duration_s": 600,
            "maintenance": True,
        },
    )
    long = await api.submit(walltime_s=3600)
    short = await api.submit(walltime_s=60)
    await api.service.schedule_once()
    assert (await api.show(short))["state"] == "RUN"
    shown = await api.show(long)
    assert shown["state"] == "PEND" and shown["reason"].startswith(
        "reservation maint holds host w1 from "
    )


async def test_reservation_changes_are_in_the_event_stream(api: Api) -> None:
    await api.register("w1")
    resp = await api.client.get("/api/v1/events", headers=USER)
    assert resp.status == 200
    now = api.service.clock()
    await api.call(
        "POST",
        "/api/v1/reservations",
        201,
        json={
            "name": "maint",
            "hosts": ["w1"],
            "start": now + 60,
            "duration_s": 60,
            "maintenance": True,
        },
    )
    seen = b""
    while b"event: reservation" not in seen:
        seen += await asyncio.wait_for(resp.content.readany(), 20)
    assert b'"name":"maint","hosts":["w1"]' in seen
    await api.call("DELETE", "/api/v1/reservations/maint", 200)
    while b'"removed":true' not in seen:
        seen += await asyncio.wait_for(resp.content.readany(), 20)
    resp.close()


async def test_running_jobs_in_the_way_refuse_a_reservation_unless_ignore_jobs(api: Api) -> None:
    await api.register("w1", slots=4)
    job = await api.submit(walltime_s=3600, slots=2)
    await api.service.schedule_once()
    assert (await api.show(job))["state"] == "RUN"
    now = api.service.clock()
    body = {"name": "m", "hosts": ["w1"], "start": now + 60, "duration_s": 60, "maintenance": True}
    answer = await api.call("POST", "/api/v1/reservations", 409, json=body)
    assert f"job {job} on host w1 will still be running" in answer["error"]["message"]
    # 2 slots of 4 leave room for the running job; after its walltime, anything goes
    await api.call("POST", "/api/v1/reservations", 201, json={**body, "slots": 2})
    await api.call(
        "POST", "/api/v1/reservations", 201, json={**body, "name": "later", "start": now + 7200}
    )
    await api.call(
        "POST",
        "/api/v1/reservations",
        201,
        json={**body, "name": "anyway", "flags": ["ignore_jobs", "overlap"]},
    )
