"""Role-based access: `action:scope` permissions, roles that bundle them, groups that grant
roles, and the one helper that applies job scopes (self / group / all).

A route declares the permission it needs without a scope (`job:view`); holding any scope of it
(`job:view:self`) passes the route check, and the job handlers then narrow what the caller
sees or touches with `job_scope` / `check_job`. Tenants are groups: a user's own jobs are
`self`, jobs of users sharing one of the caller's groups are `group`, everything is `all`.

`user:impersonate` lets a caller submit jobs that run as another user (root included). It is
apart from `job:control:all` on purpose: an operator who may stop anyone's job must not
thereby gain every user's files and root's powers; only the admin role holds it by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from xce.core.errors import Forbidden

PERMISSIONS = (
    "job:submit",
    "job:view:self",
    "job:view:group",
    "job:view:all",
    "job:control:self",
    "job:control:group",
    "job:control:all",
    "queue:view",
    "queue:admin",
    "host:view",
    "host:admin",
    "user:admin",
    "user:impersonate",
    "cluster:view",
    "cluster:admin",
    "cluster:replicate",
    "worker",
    "file:admin",  # every user's usage of the controller's file store
)
SCOPES = ("self", "group", "all")

_USER = (
    "job:submit",
    "job:view:self",
    "job:control:self",
    "queue:view",
    "host:view",
    "cluster:view",
)
DEFAULT_ROLES: dict[str, tuple[str, ...]] = {
    "user": _USER,
    "group-admin": (*_USER, "job:view:group", "job:control:group"),
    "operator": (
        "job:submit",
        "job:view:all",
        "job:control:all",
        "queue:view",
        "queue:admin",
        "host:view",
        "host:admin",
        "cluster:view",
    ),
    "admin": PERMISSIONS,
    "worker": ("worker", "cluster:view"),
    "standby": ("cluster:view", "cluster:replicate"),
}
SERVICE_ROLES = ("worker", "standby")


def expand(permissions: Iterable[str]) -> frozenset[str]:
    """Resolve `*` (everything) and `domain:action:*` / `domain:*` wildcards."""
    out: set[str] = set()
    for perm in permissions:
        if perm == "*":
            out.update(PERMISSIONS)
        elif perm.endswith(":*"):
            out.update(p for p in PERMISSIONS if p.startswith(perm[:-1]))
        else:
            out.add(perm)
    return frozenset(out)


def valid_permission(perm: str) -> bool:
    return (
        perm == "*"
        or perm in PERMISSIONS
        or (perm.endswith(":*") and any(p.startswith(perm[:-1]) for p in PERMISSIONS))
    )


@dataclass(frozen=True)
class RoleMap:
    """Roles -> permissions and groups -> roles, from `[auth.roles]` and `[auth.groups]`."""

    roles: Mapping[str, frozenset[str]] = field(
        default_factory=lambda: {r: frozenset(p) for r, p in DEFAULT_ROLES.items()}
    )
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_roles: tuple[str, ...] = ("user",)

    def roles_for(self, groups: Iterable[str], direct: Iterable[str] = ()) -> tuple[str, ...]:
        """Direct roles plus those of every group; the default roles when none applies."""
        found = dict.fromkeys(direct)
        for group in groups:
            found.update(dict.fromkeys(self.groups.get(group, ())))
        return tuple(r for r in found if r in self.roles) or self.default_roles

    def permissions(self, roles: Iterable[str]) -> frozenset[str]:
        out: set[str] = set()
        for role in roles:
            out.update(self.roles.get(role, ()))
        return frozenset(out)


def allows(permissions: frozenset[str], needed: str) -> bool:
    """A route's permission (`job:view`) is held as itself or with any scope (`job:view:self`)."""
    return needed in permissions or any(p.startswith(needed + ":") for p in permissions)


IMPERSONATE = "user:impersonate"


def check_run_as(user: str, role: str, permissions: frozenset[str], run_as: str) -> None:
    """Raise `Forbidden` naming the missing action unless `user` may have a job run as
    `run_as`: their own name always, anyone else's (root too) only with `user:impersonate`,
    whatever the host-level guards (`allow_root_jobs`) allow on top."""
    if run_as != user and IMPERSONATE not in permissions:
        raise Forbidden(
            f"{user} (role {role}) may not submit jobs as {run_as}: that needs the "
            f"{IMPERSONATE} permission"
        )


def job_scope(permissions: frozenset[str], action: str) -> str | None:
    """The widest scope held for `job:view` or `job:control`: all, group, self or None."""
    for scope in reversed(SCOPES):
        if f"{action}:{scope}" in permissions:
            return scope
    return None


GroupsOf = Callable[[str], Iterable[str]]


def may_touch(
    user: str,
    groups: Iterable[str],
    permissions: frozenset[str],
    action: str,
    owner: str,
    groups_of: GroupsOf,
) -> bool:
    """May `user` (in `groups`) do `action` (job:view or job:control) to `owner`'s job?"""
    scope = job_scope(permissions, action)
    if scope == "all":
        return True
    if scope is None:
        return False
    if owner == user:
        return True
    return scope == "group" and bool(set(groups) & set(groups_of(owner)))


def check_job(
    user: str,
    groups: Iterable[str],
    permissions: frozenset[str],
    action: str,
    owner: str,
    job_id: str,
    groups_of: GroupsOf,
) -> None:
    """Raise `Forbidden` unless the caller may do `action` to job `job_id` of `owner`."""
    if not may_touch(user, groups, permissions, action, owner, groups_of):
        verb = action.split(":")[1]
        raise Forbidden(f"{user} may not {verb} job {job_id} of user {owner}")
