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
Every bad key or value is a `ConfigError` naming it (`auth.roles.auditor[1]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce.auth.rbac import DEFAULT_ROLES, RoleMap, expand, valid_permission


@dataclass(frozen=True)
class AuthSettings:
    issuer: str = "xce"
    audience: str = "xce-api"
    token_ttl_s: float = 12 * 3600.0
    service_token_ttl_s: float = 365 * 86400.0
    roles: RoleMap = field(default_factory=RoleMap)
    backends: tuple[dict[str, Any], ...] = ()
    base: Path = field(default_factory=Path.cwd)


def _strings(where: str, value: Any) -> list[str]:
    from xce.config import ConfigError

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return value


def _roles(data: Any) -> dict[str, frozenset[str]]:
    from xce.config import ConfigError

    if not isinstance(data, dict):
        raise ConfigError("auth.roles must be a table of role = [permissions]")
    roles = {r: frozenset(p) for r, p in DEFAULT_ROLES.items()}
    for role, perms in data.items():
        for i, perm in enumerate(_strings(f"auth.roles.{role}", perms)):
            if not valid_permission(perm):
                raise ConfigError(
                    f"auth.roles.{role}[{i}] {perm!r} is not a permission "
                    "(e.g. job:view:group, queue:admin, *)"
                )
        roles[role] = expand(perms)
    return roles


def parse_auth(data: Any, base: Path) -> AuthSettings:
    """Validate `[auth]`; raises `ConfigError` naming the key."""
    from xce.auth.backends import BACKEND_TYPES
    from xce.config import ConfigError, _check_keys, _positive, _typed

    _typed("(top level)", "auth", data, dict)
    if "tokens" in data:
        raise ConfigError(
            "auth.tokens (static tokens) is gone: controllers issue JWTs now; "
            "give workers a service token (xce token create --service worker "
            "NAME) in worker.token_file"
        )
    _check_keys(
        "auth",
        data,
        {
            "issuer",
            "audience",
            "token_ttl_s",
            "service_token_ttl_s",
            "default_roles",
            "roles",
            "groups",
            "backend",
        },
    )
    out: dict[str, Any] = {"base": base}
    for key in ("issuer", "audience"):
        if key in data:
            out[key] = _typed("auth", key, data[key], str)
            if not out[key]:
                raise ConfigError(f"auth.{key} must not be empty")
    for key in ("token_ttl_s", "service_token_ttl_s"):
        if key in data:
            out[key] = float(_positive("auth", key, data[key]))
    roles = _roles(data.get("roles", {}))
    groups_raw = data.get("groups", {})
    if not isinstance(groups_raw, dict):
        raise ConfigError("auth.groups must be a table of group = [roles]")
    groups: dict[str, tuple[str, ...]] = {}
    for group, names in groups_raw.items():
        for i, role in enumerate(_strings(f"auth.groups.{group}", names)):
            if role not in roles:
                raise ConfigError(
                    f"auth.groups.{group}[{i}] {role!r} is not a role "
                    f"(roles: {', '.join(sorted(roles))})"
                )
        groups[group] = tuple(names)
    default = tuple(_strings("auth.default_roles", data.get("default_roles", ["user"])))
    for i, role in enumerate(default):
        if role not in roles:
            raise ConfigError(f"auth.default_roles[{i}] {role!r} is not a role")
    out["roles"] = RoleMap(roles, groups, default)
    backends = data.get("backend", [])
    if not isinstance(backends, list):
        raise ConfigError("auth.backend must be an array of tables ([[auth.backend]])")
    for i, section in enumerate(backends):
        if not isinstance(section, dict):
            raise ConfigError(f"auth.backend[{i}] must be a table")
        if section.get("type") not in BACKEND_TYPES:
            raise ConfigError(
                f"auth.backend[{i}].type must be one of "
                f"{', '.join(BACKEND_TYPES)}, got {section.get('type')!r}"
            )
    out["backends"] = tuple(backends)
    return AuthSettings(**out)
