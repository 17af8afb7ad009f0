"""Who a reservation is for is not every user's business: a user sees the reservations
they are in (by name or group) and maintenance windows, with only their own entries of the
user list; those who manage reservations (host:admin) see all of them."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.api.conftest import Api, as_user

ALICE = as_user("alice", "user")
CARL = as_user("carl", "user", groups=("chem",))
OPERATOR = as_user("olga", "operator")
RSV = "/api/v1/reservations"


async def _make(api: Api, name: str, users: list[str], start: float) -> None:
    body: dict[str, Any] = {"name": name, "hosts": ["w1"], "start": start, "duration_s": 60}
    body.update({"users": users} if users else {"maintenance": True})
    await api.call("POST", RSV, 201, json=body, headers=OPERATOR)


async def _setup(api: Api) -> None:
    await api.register("w1")
    now = api.service.clock()
    await _make(api, "shared", ["alice", "bob", "@chem"], now + 3600)
    await _make(api, "bobs", ["bob"], now + 7200)
    await _make(api, "maint", [], now + 9000)


async def test_a_user_sees_only_their_reservations_and_only_themselves(api: Api) -> None:
    await _setup(api)
    listed = (await api.call("GET", RSV, 200, headers=ALICE))["reservations"]
    assert [r["name"] for r in listed] == ["shared", "maint"]
    assert listed[0]["users"] == ["alice"] and listed[0]["users_hidden"] == 2
    assert "bob" not in str(listed)
    missing = await api.call("GET", f"{RSV}/bobs", 404, headers=ALICE)
    nothing = await api.call("GET", f"{RSV}/nosuch", 404, headers=ALICE)
    assert missing["error"]["message"] == "reservation 'bobs' does not exist", missing
    assert nothing["error"]["message"] == "reservation 'nosuch' does not exist", nothing
    shown = await api.call("GET", f"{RSV}/shared", 200, headers=ALICE)
    assert shown["users"] == ["alice"]


async def test_a_group_entry_shows_to_its_members(api: Api) -> None:
    await _setup(api)
    listed = (await api.call("GET", RSV, 200, headers=CARL))["reservations"]
    assert [(r["name"], r["users"]) for r in listed] == [("shared", ["@chem"]), ("maint", [])]


async def test_operators_and_admins_see_every_reservation_whole(api: Api) -> None:
    await _setup(api)
    for headers in (OPERATOR, {}):  # {}: the fixture's admin token
        listed = (await api.call("GET", RSV, 200, headers=headers))["reservations"]
        assert {r["name"]: r["users"] for r in listed} == {
            "shared": ["alice", "bob", "@chem"],
            "bobs": ["bob"],
            "maint": [],
        }
        assert all("users_hidden" not in r for r in listed)


async def test_the_event_stream_keeps_others_reservations_from_a_user(api: Api) -> None:
    await api.register("w1")
    resp = await api.client.get("/api/v1/events", headers=ALICE)
    assert resp.status == 200
    now = api.service.clock()
    await _make(api, "bobs", ["bob"], now + 60)
    await _make(api, "alices", ["alice", "dora"], now + 600)
    seen = b""
    while b'"name":"alices"' not in seen:
        seen += await asyncio.wait_for(resp.content.readany(), 20)
    resp.close()
    assert b"bobs" not in seen and b"dora" not in seen, seen
    assert b'"users":["alice"]' in seen, seen
