"""`[auth]` in the cluster config: token lifetimes, roles, group -> role mapping, backends.

```toml
[auth]
issuer = "xce"                 # the JWT `iss`; `audience` is the JWT `aud`
token_ttl_s = 43200            # login tokens (12 h); service tokens: service_token_ttl_s
default_roles = ["user"]       # roles of a user that no group or user entry gives any
[auth.roles]                   # add roles or replace a default role's permission set
auditor = ["job:view:all", "queue:view", "host:view", "cluster:view"]
[auth.groups]                  # group -> roles
physics-leads = ["group-admin"]
[[auth.backend]]               # tried in order at login
type = "configfile"
path = "users.toml"
```
Every bad key or value is a `ConfigError` naming it (`auth.roles.auditor[1]`); each
backend's own keys are checked by its module (xce/auth/backends).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from xce.config.check import PosFloat, Table, convert, values
from xce.core.errors import ConfigError
from xce.core.rbac import DEFAULT_ROLES, RoleMap, expand, valid_permission
from xce.core.validation import Invalid, error, hint

Name = Annotated[str, msgspec.Meta(min_length=1), hint("must not be empty")]
Strings = Annotated[tuple[str, ...], error("must be a list of strings", got=True)]


# The login backends a `[[auth.backend]]` may name: each is a module of xce/auth/backends.
BACKEND_TYPES = ("configfile", "ldap", "pam", "oauth2", "munge")


class AuthKeys(Table, frozen=True):
    """The `[auth]` keys read as written: JWT `iss` and `aud`, token lifetimes."""

    issuer: Name = "xce"
    audience: Name = "xce-api"
    token_ttl_s: PosFloat = 12 * 3600.0
    service_token_ttl_s: PosFloat = 365 * 86400.0


class AuthSettings(AuthKeys, frozen=True):
    """`[auth]` as the controller reads it: roles resolved, backends still to be built
    (against `base`, the config file's folder)."""

    roles: RoleMap = msgspec.field(default_factory=RoleMap)
    backends: tuple[dict[str, Any], ...] = ()
    base: Path = msgspec.field(default_factory=Path.cwd)


class AuthTable(AuthKeys, frozen=True):
    """`[auth]` as written in the file."""

    default_roles: Strings = RoleMap().default_roles
    roles: Annotated[dict[str, Strings], error("must be a table of role = [permissions]")] = {}
    groups: Annotated[dict[str, Strings], error("must be a table of group = [roles]")] = {}
    backend: Annotated[
        list[Annotated[dict[str, Any], error("must be a table")]],
        error("must be an array of tables ([[auth.backend]])"),
    ] = []

    def __post_init__(self) -> None:
        roles = self.role_permissions()
        for group, names in self.groups.items():
            for i, role in enumerate(names):
                if role not in roles:
                    raise Invalid(
                        f"groups.{group}[{i}] {role!r} is not a role "
                        f"(roles: {', '.join(sorted(roles))})"
                    )
        for i, role in enumerate(self.default_roles):
            if role not in roles:
                raise Invalid(f"default_roles[{i}] {role!r} is not a role")
        for i, section in enumerate(self.backend):
            if section.get("type") not in BACKEND_TYPES:
                raise Invalid(
                    f"backend[{i}].type must be one of "
                    f"{', '.join(BACKEND_TYPES)}, got {section.get('type')!r}"
                )

    def role_permissions(self) -> dict[str, frozenset[str]]:
        """The default roles, with `[auth.roles]` added or replacing them."""
        roles = {r: frozenset(p) for r, p in DEFAULT_ROLES.items()}
        for role, perms in self.roles.items():
            for i, perm in enumerate(perms):
                if not valid_permission(perm):
                    raise Invalid(
                        f"roles.{role}[{i}] {perm!r} is not a permission "
                        "(e.g. job:view:group, queue:admin, *)"
                    )
            roles[role] = expand(perms)
        return roles

    def settings(self, base: Path) -> AuthSettings:
        return AuthSettings(
            **values(self, AuthKeys),
            roles=RoleMap(self.role_permissions(), self.groups, self.default_roles),
            backends=tuple(self.backend),
            base=base,
        )


def refuse_static_tokens(data: Any) -> None:
    """`auth.tokens` was a key once: say where its job went rather than `unknown key`."""
    if isinstance(data, dict) and "tokens" in data:
        raise ConfigError(
            "auth.tokens (static tokens) is gone: controllers issue JWTs now; "
            "give workers a service token (xce token create --service worker "
            "NAME) in worker.token_file"
        )


def parse_auth(data: Any, base: Path) -> AuthSettings:
    """Validate `[auth]` alone (xce init, xce up); raises `ConfigError` naming the key."""
    refuse_static_tokens(data)
    return convert(data, AuthTable, "auth").settings(base)
