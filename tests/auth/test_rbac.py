"""Permissions, roles, scopes, and the route table: every route names a real permission."""

from __future__ import annotations

import pytest

from xce.api.routes import all_routes
from xce.core.errors import Forbidden
from xce.core.rbac import (
    DEFAULT_ROLES,
    PERMISSIONS,
    RoleMap,
    allows,
    check_job,
    expand,
    job_scope,
    may_touch,
)

GROUPS = {"alice": ("physics",), "carol": ("physics",), "bob": ("chemistry",)}


def groups_of(user: str) -> tuple[str, ...]:
    return GROUPS.get(user, ())


def test_every_route_declares_a_permission_some_role_grants() -> None:
    """The route table is the one place permissions are declared: each is known."""
    admin = RoleMap().permissions(["admin"])
    for route in all_routes():
        where = f"{route.method} {route.path}"
        if route.permission in ("public", "authenticated"):
            continue
        assert any(allows(frozenset({p}), route.permission) for p in PERMISSIONS), where
        assert allows(admin, route.permission), where
        assert route.permission.count(":") <= 1, f"{where}: routes declare no scope"


def test_mutating_routes_are_never_public() -> None:
    """Only the ways in are public: logging in, and joining with a one-time join token (which
    is the credential; the cluster CA it returns is public knowledge)."""
    public = {(r.method, r.path) for r in all_routes() if r.permission == "public"}
    assert public == {
        ("GET", "/healthz"),
        ("GET", "/api/v1/openapi.json"),
        ("POST", "/api/v1/auth/login"),
        ("POST", "/api/v1/auth/device"),
        ("POST", "/api/v1/auth/device/token"),
        ("POST", "/api/v1/auth/authorize"),
        ("POST", "/api/v1/auth/code"),
        ("GET", "/api/v1/auth/munge"),  # what a MUNGE credential must carry
        ("POST", "/api/v1/auth/munge"),
        ("GET", "/api/v1/join/ca"),
        ("POST", "/api/v1/join"),
    }


def test_default_roles() -> None:
    roles = RoleMap()
    user, worker = roles.permissions(["user"]), roles.permissions(["worker"])
    assert job_scope(user, "job:view") == "self" and job_scope(user, "job:control") == "self"
    assert job_scope(roles.permissions(["group-admin"]), "job:control") == "group"
    assert job_scope(roles.permissions(["operator"]), "job:control") == "all"
    assert not allows(user, "queue:admin") and allows(user, "queue:view")
    assert not allows(worker, "job:submit") and allows(worker, "worker")
    assert job_scope(worker, "job:view") is None
    assert not allows(roles.permissions(["operator"]), "user:admin")
    assert roles.permissions(["admin"]) == frozenset(PERMISSIONS)
    assert set(DEFAULT_ROLES) == {"user", "group-admin", "operator", "admin", "worker", "standby"}


def test_wildcards_expand() -> None:
    assert expand(["job:view:*"]) == {"job:view:self", "job:view:group", "job:view:all"}
    assert expand(["*"]) == frozenset(PERMISSIONS)


def test_roles_from_groups_and_defaults() -> None:
    roles = RoleMap(groups={"leads": ("group-admin",), "ops": ("operator", "ghost")})
    assert roles.roles_for(["leads", "ops"]) == ("group-admin", "operator")
    assert roles.roles_for(["nothing"]) == ("user",)
    assert roles.roles_for([], ["admin"]) == ("admin",)


@pytest.mark.parametrize(
    ("role", "owner", "expected"),
    [
        ("user", "alice", True),
        ("user", "carol", False),
        ("user", "bob", False),
        ("group-admin", "carol", True),
        ("group-admin", "bob", False),
        ("operator", "bob", True),
        ("worker", "alice", False),
    ],
)
def test_scopes(role: str, owner: str, expected: bool) -> None:
    perms = RoleMap().permissions([role])
    assert may_touch("alice", GROUPS["alice"], perms, "job:control", owner, groups_of) is expected
    if not expected:
        with pytest.raises(Forbidden, match=f"alice may not control job 7 of user {owner}"):
            check_job("alice", GROUPS["alice"], perms, "job:control", owner, "7", groups_of)


def test_group_admin_without_shared_group_sees_only_own() -> None:
    perms = RoleMap().permissions(["group-admin"])
    assert not may_touch("dora", (), perms, "job:view", "alice", groups_of)
    assert may_touch("dora", (), perms, "job:view", "dora", groups_of)
