"""Static bearer tokens: 401 without a valid token, 403 outside the role's permissions."""

from __future__ import annotations

from typing import Any

import pytest

from xce.api.routes import all_routes

from .conftest import TOKENS, Api, auth

JOBS = "/api/v1/jobs"
REGISTER = {"host": "w1", "slots": 4, "memory_mb": 4000}


async def status_of(
    api: Api,
    method: str,
    path: str,
    role: str | None = None,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> tuple[int, Any]:
    sent = dict(headers or {})
    if role is not None:
        sent.update(auth(role))
    resp = await api.client.request(method, path, headers=sent, **kwargs)
    body = await resp.json() if resp.content_type == "application/json" else await resp.read()
    return resp.status, body


async def expect(
    api: Api, status: int, method: str, path: str, role: str | None = None, **kwargs: Any
) -> Any:
    got, body = await status_of(api, method, path, role, **kwargs)
    assert got == status, (method, path, role, got, body)
    if status >= 400:
        assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"]
    return body


# --- 401 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", JOBS),
        ("POST", JOBS),
        ("GET", "/api/v1/cluster"),
        ("GET", "/api/v1/queues"),
        ("POST", "/api/v1/workers/register"),
    ],
)
async def test_no_token_is_401(secured: Api, method: str, path: str) -> None:
    body = await expect(secured, 401, method, path, json={"command": "true"})
    assert body["error"]["code"] == "unauthorized"
    assert "token" in body["error"]["message"]


@pytest.mark.parametrize(
    "header",
    [
        "Bearer not-a-token",
        "Bearer " + TOKENS["admin"] + "x",
        "Basic " + TOKENS["admin"],
        "Bearer",
        "Bearer ",
        TOKENS["admin"],
        "Token " + TOKENS["admin"],
    ],
)
async def test_bad_token_is_401(secured: Api, header: str) -> None:
    body = await expect(secured, 401, "GET", JOBS, headers={"Authorization": header})
    assert body["error"]["code"] == "unauthorized"


async def test_scheme_is_case_insensitive(secured: Api) -> None:
    await expect(secured, 200, "GET", JOBS, headers={"Authorization": "bearer " + TOKENS["user"]})


async def test_x_xce_user_is_ignored_with_tokens(secured: Api) -> None:
    """X-XCE-User is not an identity: only the token counts."""
    body = await expect(
        secured, 201, "POST", JOBS, "user", json={"command": "true"}, headers={"X-XCE-User": "root"}
    )
    job = await expect(secured, 200, "GET", f"{JOBS}/{body['job_id']}", "user")
    assert job["user"] == "alice"


@pytest.mark.parametrize("path", ["/healthz", "/api/v1/openapi.json"])
@pytest.mark.parametrize("header", [None, "Bearer not-a-token"])
async def test_public_routes_need_no_token(secured: Api, path: str, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    await expect(secured, 200, "GET", path, headers=headers)


async def test_unknown_route_is_404_not_401(secured: Api) -> None:
    await expect(secured, 404, "GET", "/api/v1/nothing")


# --- user role ------------------------------------------------------------------------


async def test_user_submits_and_views_own_jobs(secured: Api) -> None:
    body = await expect(secured, 201, "POST", JOBS, "user", json={"command": "true"})
    await expect(secured, 201, "POST", JOBS, "user", json={"command": "true", "user": "alice"})
    rows = await expect(secured, 200, "GET", f"{JOBS}?user=alice", "user")
    assert rows["total"] == 2
    await expect(secured, 200, "GET", f"{JOBS}/{body['job_id']}", "user")
    await expect(secured, 200, "POST", f"{JOBS}/{body['job_id']}/stop", "user")
    await expect(secured, 200, "POST", f"{JOBS}/{body['job_id']}/kill", "user")
    await expect(secured, 201, "POST", "/api/v1/uploads", "user", data=b"data")
    for path in ("/api/v1/queues", "/api/v1/hosts", "/api/v1/cluster", "/api/v1/queues/normal"):
        await expect(secured, 200, "GET", path, "user")


async def test_user_cannot_submit_as_another_user(secured: Api) -> None:
    body = await expect(secured, 403, "POST", JOBS, "user", json={"command": "true", "user": "bob"})
    assert body["error"]["code"] == "forbidden"
    assert "bob" in body["error"]["message"]
    assert secured.service.state.jobs == {}


async def test_user_cannot_create_or_change_queues(secured: Api) -> None:
    body = await expect(secured, 403, "POST", "/api/v1/queues", "user", json={"name": "mine"})
    assert "user" in body["error"]["message"] and "queue:admin" in body["error"]["message"]
    assert "mine" not in secured.service.state.queues
    for action in ("open", "close", "activate", "deactivate"):
        await expect(secured, 403, "POST", f"/api/v1/queues/normal/{action}", "user")
    assert secured.service.state.queues["normal"].open


async def test_user_cannot_change_hosts(secured: Api) -> None:
    await expect(secured, 200, "POST", "/api/v1/workers/register", "worker", json=REGISTER)
    for action in ("open", "close", "drain"):
        await expect(secured, 403, "POST", f"/api/v1/hosts/w1/{action}", "user")
    assert (await expect(secured, 200, "GET", "/api/v1/hosts/w1", "user"))["admin"] == "open"


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("POST", "/api/v1/workers/register", {"json": REGISTER}),
        ("POST", "/api/v1/workers/w1/heartbeat", {"json": {}}),
        ("GET", "/api/v1/workers/w1/assignments", {}),
        ("GET", "/api/v1/workers/w1/jobs/1/inputs/in.txt?attempt=0", {}),
        ("PUT", "/api/v1/workers/w1/jobs/1/outputs/stdout?attempt=0", {"data": b"x"}),
        ("POST", "/api/v1/workers/w1/jobs/1/finished", {"json": {"attempt": 0, "exit_code": 0}}),
    ],
)
async def test_user_cannot_call_worker_routes(
    secured: Api, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    body = await expect(secured, 403, method, path, "user", **kwargs)
    assert "worker" in body["error"]["message"]


async def test_user_cannot_kill_another_users_job(secured: Api) -> None:
    body = await expect(
        secured, 201, "POST", JOBS, "admin", json={"command": "true", "user": "bob"}
    )
    await expect(secured, 403, "POST", f"{JOBS}/{body['job_id']}/kill", "user")


# --- worker role ----------------------------------------------------------------------


async def test_worker_role_runs_the_protocol(secured: Api) -> None:
    body = await expect(secured, 201, "POST", JOBS, "user", json={"command": "true"})
    job_id = body["job_id"]
    registered = await expect(
        secured, 200, "POST", "/api/v1/workers/register", "worker", json=REGISTER
    )
    assert registered["jobs"] == []
    await secured.service.schedule_once()
    got = await expect(secured, 200, "GET", "/api/v1/workers/w1/assignments", "worker")
    assert [a["job_id"] for a in got["jobs"]] == [job_id]
    await expect(secured, 200, "POST", "/api/v1/workers/w1/heartbeat", "worker", json={})
    await expect(
        secured,
        201,
        "PUT",
        f"/api/v1/workers/w1/jobs/{job_id}/outputs/stdout?attempt=0&first=1",
        "worker",
        data=b"ok\n",
    )
    done = await expect(
        secured,
        200,
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        "worker",
        json={"attempt": 0, "exit_code": 0},
    )
    assert done == {"accepted": True}
    await expect(secured, 200, "GET", "/api/v1/cluster", "worker")
    assert await expect(secured, 200, "GET", f"{JOBS}/{job_id}/files/stdout", "user") == b"ok\n"


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("POST", JOBS, {"json": {"command": "true"}}),
        ("GET", JOBS, {}),
        ("GET", f"{JOBS}/1", {}),
        ("POST", f"{JOBS}/1/kill", {}),
        ("POST", "/api/v1/uploads", {"data": b"x"}),
        ("POST", "/api/v1/queues", {"json": {"name": "q"}}),
        ("GET", "/api/v1/hosts", {}),
        ("POST", "/api/v1/hosts/w1/drain", {}),
    ],
)
async def test_worker_role_is_only_a_worker(
    secured: Api, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    await expect(secured, 403, method, path, "worker", **kwargs)


# --- admin ----------------------------------------------------------------------------


async def test_admin_can_do_everything(secured: Api) -> None:
    body = await expect(
        secured, 201, "POST", JOBS, "admin", json={"command": "true", "user": "bob"}
    )
    job_id = body["job_id"]
    assert (await expect(secured, 200, "GET", f"{JOBS}/{job_id}", "admin"))["user"] == "bob"
    await expect(secured, 201, "POST", "/api/v1/queues", "admin", json={"name": "extra"})
    await expect(secured, 200, "POST", "/api/v1/queues/extra/close", "admin")
    await expect(secured, 200, "POST", "/api/v1/workers/register", "admin", json=REGISTER)
    await expect(secured, 200, "POST", "/api/v1/hosts/w1/close", "admin", json={"reason": "x"})
    await expect(secured, 200, "POST", "/api/v1/hosts/w1/open", "admin")
    await expect(secured, 200, "GET", "/api/v1/workers/w1/assignments", "admin")
    await expect(secured, 200, "POST", f"{JOBS}/{job_id}/kill", "admin")
    await expect(secured, 200, "GET", "/api/v1/cluster", "admin")


async def test_every_route_is_guarded(secured: Api) -> None:
    """Walk the route table: each non-public route refuses a request without a token."""
    for route in all_routes():
        path = route.path.replace("{path:.+}", "x").replace("{job_id}", "1")
        path = path.replace("{host}", "w1").replace("{name}", "normal")
        path = path.replace("{upload_id}", "0" * 32)
        got, _ = await status_of(secured, route.method, path)
        if route.permission == "public" and route.method == "GET":
            # the CA without TLS, and MUNGE without a munge backend: 404
            assert got == 200 or route.path in ("/api/v1/join/ca", "/api/v1/auth/munge"), route
        elif route.permission == "public":
            # Login routes are refused for the body, not a token; the join routes want a
            # body or a CA first (4xx), never a token.
            assert got not in (401, 403) and 400 <= got < 500, (route.method, route.path, got)
        else:
            assert got == 401, (route.method, route.path, got)
