"""Which jobs a caller may see: one rule for listings and the live event stream.

Today's static-token roles (admin, user) all see every job, exactly as `GET /api/v1/jobs`
lists them. When an identity carries RBAC permissions (`permissions`, the auth issue's
`job:view:self|group|all` scopes), the narrowest rule they allow applies: `all` sees every
job, `group` the jobs of users in the caller's groups that the identity can name
(`group_members`, if the RBAC layer provides it) plus its own, `self` only its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JobVisible = Callable[[str | None], bool]


def job_visibility(identity: Any) -> JobVisible:
    """A predicate over a job's owner; `None` (not a job) is always visible."""
    permissions = getattr(identity, "permissions", None)
    if permissions is None:
        return lambda user: True
    perms = set(permissions)
    if perms & {"*", "job:view", "job:view:all"}:
        return lambda user: True
    me = identity.name
    if "job:view:group" in perms:
        members = set(getattr(identity, "group_members", ()) or ()) | {me}
        return lambda user: user is None or user in members
    return lambda user: user is None or user == me


def may(identity: Any, permission: str) -> bool:
    """Whether an identity with RBAC permissions holds `permission` (True without RBAC)."""
    permissions = getattr(identity, "permissions", None)
    if permissions is None:
        return True
    return bool({"*", permission} & set(permissions)) or any(
        p.startswith(permission + ":") for p in permissions
    )
