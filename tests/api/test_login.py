"""Login, whoami, service tokens, revocation, key rotation and the OIDC device routes."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from xce.api.http import AUTH
from xce.auth.backends.base import (
    AuthDenied,
    BackendUnavailable,
    DeviceAuthorization,
    Principal,
)
from xce.core.rbac import PERMISSIONS

from .conftest import PASSWORDS, Api, login

LOGIN = "/api/v1/auth/login"
WHOAMI = "/api/v1/auth/whoami"


async def test_login_returns_a_token_that_whoami_knows(tenants: Api) -> None:
    body = await tenants.call(
        "POST", LOGIN, 200, json={"username": "carol", "password": PASSWORDS["carol"]}
    )
    assert set(body) == {"token", "expires_at", "user", "groups", "roles", "permissions"}
    assert (body["user"], body["groups"], body["roles"]) == (
        "carol",
        ["physics", "physics-leads"],
        ["group-admin"],
    )
    assert "job:control:group" in body["permissions"]
    assert "job:control:all" not in body["permissions"]
    assert body["expires_at"] - time.time() == pytest.approx(12 * 3600, abs=10)
    who = await tenants.call(
        "GET", WHOAMI, 200, headers={"Authorization": f"Bearer {body['token']}"}
    )
    assert who == {
        "user": "carol",
        "groups": ["physics", "physics-leads"],
        "roles": ["group-admin"],
        "permissions": body["permissions"],
        "kind": "user",
    }


async def test_roles_come_from_user_entries_groups_and_defaults(tenants: Api) -> None:
    for user, roles in (("alice", ["user"]), ("dave", ["operator"]), ("root", ["admin"])):
        who = await tenants.call("GET", WHOAMI, 200, headers=await login(tenants, user))
        assert who["roles"] == roles, user
    who = await tenants.call("GET", WHOAMI, 200, headers=await login(tenants, "root"))
    assert set(who["permissions"]) == set(PERMISSIONS)


async def test_wrong_password_and_unknown_user_look_the_same(tenants: Api) -> None:
    answers = []
    for username, password in (
        ("alice", "not-her-password"),
        ("nobody", "whatever"),
        ("alice", ""),
        ("ALICE", PASSWORDS["alice"]),
    ):
        started = time.monotonic()
        resp = await tenants.client.post(
            LOGIN, json={"username": username, "password": password or "x"}
        )
        elapsed = time.monotonic() - started
        assert resp.status == 401, username
        answers.append(await resp.json())
        assert elapsed >= 0.2, (username, elapsed)  # hash burnt + failure floor
    assert all(a == answers[0] for a in answers)
    assert answers[0]["error"] == {"code": "auth_denied", "message": "wrong user name or password"}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"username": "alice"},
        {"password": "x"},
        {"username": "alice", "password": "x", "extra": 1},
        {"username": "", "password": "x"},
    ],
)
async def test_bad_login_bodies_are_400(tenants: Api, body: dict[str, Any]) -> None:
    got = await tenants.call("POST", LOGIN, 400, json=body)
    assert got["error"]["code"] == "invalid_request"


async def test_password_hashes_never_leave(tenants: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    admin = await login(tenants, "root")
    await tenants.call("POST", LOGIN, 401, json={"username": "bob", "password": "nope-nope"})
    listed = await tenants.call("GET", "/api/v1/users", 200, headers=admin)
    added = await tenants.call(
        "POST",
        "/api/v1/users",
        201,
        headers=admin,
        json={"user": "erin", "password": "erin-password-1"},
    )
    texts = [
        str(listed),
        str(added),
        caplog.text,
        (tenants.service.settings.state_dir / "audit.log").read_text(),
    ]
    for text in texts:
        assert "scrypt$" not in text
        assert "erin-password-1" not in text and "nope-nope" not in text
    assert {u["user"] for u in listed["users"]} == set(PASSWORDS)
    assert all(set(u) == {"user", "groups", "roles", "effective_roles"} for u in listed["users"])


async def test_user_admin_routes(tenants: Api) -> None:
    admin, alice = await login(tenants, "root"), await login(tenants, "alice")
    await tenants.call("GET", "/api/v1/users", 403, headers=alice)
    await tenants.call(
        "POST", "/api/v1/users", 403, headers=alice, json={"user": "x", "password": "12345678"}
    )
    await tenants.call(
        "POST",
        "/api/v1/users",
        201,
        headers=admin,
        json={"user": "erin", "password": "erin-password", "groups": ["chemistry"]},
    )
    await tenants.call(
        "POST",
        "/api/v1/users",
        409,
        headers=admin,
        json={"user": "erin", "password": "erin-password"},
    )
    await tenants.call(
        "POST",
        "/api/v1/users",
        404,
        headers=admin,
        json={"user": "fred", "password": "fred-password", "roles": ["king"]},
    )
    await tenants.call(
        "POST",
        "/api/v1/users",
        400,
        headers=admin,
        json={"user": "../etc", "password": "erin-password"},
    )
    who = await tenants.call(
        "POST", LOGIN, 200, json={"username": "erin", "password": "erin-password"}
    )
    assert who["groups"] == ["chemistry"] and who["roles"] == ["user"]
    # Own password: allowed with the current one (like passwd(1)); someone else's: only with
    # user:admin, which needs no old password.
    await tenants.call(
        "POST",
        "/api/v1/users/alice/password",
        400,
        headers=alice,
        json={"password": "alice-new-pw"},
    )
    await tenants.call(
        "POST",
        "/api/v1/users/alice/password",
        403,
        headers=alice,
        json={"password": "alice-new-pw", "old_password": "a wrong guess"},
    )
    await tenants.call(
        "POST", LOGIN, 200, json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    other_session = await login(tenants, "alice")  # e.g. a token left in another shell
    changed = await tenants.call(
        "POST",
        "/api/v1/users/alice/password",
        200,
        headers=alice,
        json={"password": "alice-new-pw", "old_password": PASSWORDS["alice"]},
    )
    # Every earlier token of alice is revoked; she gets a fresh one for this session.
    for old_token in (alice, other_session):
        body = await tenants.call("GET", WHOAMI, 401, headers=old_token)
        assert "revoked" in body["error"]["message"]
    alice = {"Authorization": f"Bearer {changed['session']['token']}"}
    assert (await tenants.call("GET", WHOAMI, 200, headers=alice))["user"] == "alice"
    await tenants.call(
        "POST", "/api/v1/users/bob/password", 403, headers=alice, json={"password": "hijacked-pw"}
    )
    await tenants.call(
        "POST", LOGIN, 401, json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    await tenants.call("POST", LOGIN, 200, json={"username": "alice", "password": "alice-new-pw"})
    # Deleting a user also revokes their tokens.
    erin = {"Authorization": f"Bearer {who['token']}"}
    await tenants.call("DELETE", "/api/v1/users/erin", 200, headers=admin)
    await tenants.call("GET", WHOAMI, 401, headers=erin)
    await tenants.call("POST", LOGIN, 401, json={"username": "erin", "password": "erin-password"})
    await tenants.call("DELETE", "/api/v1/users/erin", 404, headers=admin)
    bob = await login(tenants, "bob")
    reset = await tenants.call(
        "POST",
        "/api/v1/users/bob/password",
        200,
        headers=admin,
        json={"password": "reset-by-admin"},
    )
    assert "session" not in reset  # the admin's own token is not bob's
    await tenants.call("GET", WHOAMI, 401, headers=bob)  # a reset revokes bob's tokens too
    await tenants.call("GET", WHOAMI, 200, headers=admin)


async def test_user_routes_without_a_users_file_are_404(api: Api) -> None:
    body = await api.call("GET", "/api/v1/users", 404)
    assert "configfile" in body["error"]["message"]


async def test_revoked_user_token_is_refused(tenants: Api) -> None:
    alice, bob, admin = [await login(tenants, u) for u in ("alice", "bob", "root")]
    await tenants.call("GET", WHOAMI, 200, headers=alice)  # her identity is now remembered
    await tenants.call("POST", "/api/v1/auth/revoke", 403, headers=bob, json={"user": "alice"})
    await tenants.call("POST", "/api/v1/auth/revoke", 200, headers=admin, json={"user": "alice"})
    body = await tenants.call("GET", WHOAMI, 401, headers=alice)
    assert "revoked" in body["error"]["message"]
    await tenants.call("GET", WHOAMI, 200, headers=bob)
    await tenants.call("GET", WHOAMI, 200, headers=await login(tenants, "alice"))


async def test_service_tokens(tenants: Api) -> None:
    admin, alice = await login(tenants, "root"), await login(tenants, "alice")
    await tenants.call(
        "POST", "/api/v1/auth/tokens", 403, headers=alice, json={"name": "w9", "role": "worker"}
    )
    await tenants.call(
        "POST", "/api/v1/auth/tokens", 400, headers=admin, json={"name": "w9", "role": "admin"}
    )
    made = await tenants.call(
        "POST", "/api/v1/auth/tokens", 201, headers=admin, json={"name": "w9", "role": "worker"}
    )
    assert made["expires_at"] - time.time() > 300 * 86400
    worker = {"Authorization": f"Bearer {made['token']}"}
    who = await tenants.call("GET", WHOAMI, 200, headers=worker)
    assert (who["user"], who["kind"], who["roles"]) == ("w9", "service", ["worker"])
    await tenants.call(
        "POST",
        "/api/v1/workers/register",
        200,
        headers=worker,
        json={"host": "w9", "slots": 1, "memory_mb": 100},
    )
    # The token is bound to its host: it cannot register or speak for another one.
    await tenants.call(
        "POST",
        "/api/v1/workers/register",
        200,
        headers=admin,
        json={"host": "w8", "slots": 1, "memory_mb": 100},
    )
    got = await tenants.call(
        "POST",
        "/api/v1/workers/register",
        403,
        headers=worker,
        json={"host": "w8", "slots": 1, "memory_mb": 100},
    )
    assert "bound to host w9" in got["error"]["message"]
    await tenants.call(
        "POST", "/api/v1/workers/w8/heartbeat", 403, headers=worker, json={"running": []}
    )
    await tenants.call("GET", "/api/v1/workers/w8/assignments", 403, headers=worker)
    await tenants.call(
        "POST", "/api/v1/workers/w9/heartbeat", 200, headers=worker, json={"running": []}
    )
    # A worker token cannot submit, list or control jobs.
    got = await tenants.call("POST", "/api/v1/jobs", 403, headers=worker, json={"command": "true"})
    assert "job:submit" in got["error"]["message"]
    await tenants.call("GET", "/api/v1/jobs", 403, headers=worker)
    await tenants.call("POST", "/api/v1/auth/revoke", 200, headers=admin, json={"user": "w9"})
    await tenants.call("GET", WHOAMI, 401, headers=worker)


async def test_key_rotation_keeps_old_tokens(tenants: Api) -> None:
    admin, alice = await login(tenants, "root"), await login(tenants, "alice")
    await tenants.call("POST", "/api/v1/auth/keys/rotate", 403, headers=alice)
    rotated = await tenants.call("POST", "/api/v1/auth/keys/rotate", 200, headers=admin)
    assert rotated["kid"] != rotated["previous"]
    await tenants.call("GET", WHOAMI, 200, headers=alice)
    fresh = await login(tenants, "alice")
    assert tenants.app[AUTH].tokens.verify(fresh["Authorization"][7:]).kid == rotated["kid"]


# --- OIDC device routes: dispatch only (the real provider is tested with the backend) ----


class FakeOidc:
    """Only here to check the routing to the first OIDC backend; not a provider."""

    name = "fake-oidc"

    def __init__(self) -> None:
        self.polls = 0

    async def start_device_flow(self) -> DeviceAuthorization:
        return DeviceAuthorization(
            "dev-code",
            "ABCD-EFGH",
            "http://127.0.0.1/verify",
            "http://127.0.0.1/verify?code=ABCD-EFGH",
            600,
            5,
        )

    async def poll_device_flow(self, device_code: str) -> Principal | None:
        if device_code == "denied":
            raise AuthDenied("the user said no")
        self.polls += 1
        return None if self.polls == 1 else Principal("olivia", ("physics",), self.name)

    async def authorization_url(self, redirect_uri: str, state: str, code_verifier: str) -> str:
        raise NotImplementedError

    async def exchange_code(self, code: str, redirect_uri: str, code_verifier: str) -> Principal:
        raise NotImplementedError

    async def principal_from_token(self, token: str) -> Principal:
        raise NotImplementedError


async def test_device_routes_without_a_provider_are_404(api: Api) -> None:
    for path, body in (
        ("/api/v1/auth/device", None),
        ("/api/v1/auth/device/token", {"device_code": "x"}),
    ):
        got = await api.call("POST", path, 404, json=body)
        assert "OpenID Connect" in got["error"]["message"]


async def test_device_routes_call_the_first_oidc_backend(tenants: Api) -> None:
    runtime = tenants.app[AUTH]
    runtime.backends.append(FakeOidc())
    start = await tenants.call("POST", "/api/v1/auth/device", 200)
    assert start["user_code"] == "ABCD-EFGH" and start["interval"] == 5
    pending = await tenants.call(
        "POST", "/api/v1/auth/device/token", 400, json={"device_code": "dev-code"}
    )
    assert pending["error"]["code"] == "authorization_pending"
    denied = await tenants.call(
        "POST", "/api/v1/auth/device/token", 400, json={"device_code": "denied"}
    )
    assert denied["error"]["code"] == "access_denied"
    done = await tenants.call(
        "POST", "/api/v1/auth/device/token", 200, json={"device_code": "dev-code"}
    )
    assert (done["user"], done["groups"], done["roles"]) == ("olivia", ["physics"], ["user"])
    who = await tenants.call(
        "GET", WHOAMI, 200, headers={"Authorization": f"Bearer {done['token']}"}
    )
    assert who["user"] == "olivia"


async def test_middleware_refuses_stale_and_foreign_tokens(tenants: Api) -> None:
    tokens = tenants.app[AUTH].tokens
    expired, _ = tokens.issue("alice", (), ("user",), ttl_s=60, now=time.time() - 600)
    future, _ = tokens.issue("alice", (), ("user",), now=time.time() + 600)
    for token, words in ((expired, "expired"), (future, "not valid yet")):
        body = await tenants.call("GET", WHOAMI, 401, headers={"Authorization": f"Bearer {token}"})
        assert words in body["error"]["message"]


class _Down:
    """A password backend whose server cannot be reached (as an unreachable LDAP server)."""

    name = "down"

    async def authenticate(self, username: str, password: str) -> Principal | None:
        raise BackendUnavailable("cannot reach ldap://127.0.0.1:1")


async def test_backends_are_tried_in_order(tenants: Api) -> None:
    """An unreachable first backend does not stop the configfile users from logging in;
    when nobody accepts, the outage is reported (503), not a wrong password."""
    tenants.app[AUTH].backends.insert(0, _Down())
    await tenants.call(
        "POST", LOGIN, 200, json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    body = await tenants.call(
        "POST", LOGIN, 503, json={"username": "alice", "password": "not-her-password"}
    )
    assert body["error"]["code"] == "auth_backend_unavailable"
