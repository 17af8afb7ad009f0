"""The controller's identity service: tokens, roles, login backends, groups and audit, together.

One `AuthRuntime` per controller (built from `Config` at start). The HTTP layer asks it two
things: "who is this bearer token?" (`claims` + `permissions`) and "log this user in"
(`login`), which tries the configured password backends in order and issues XCE's JWT.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xce.auth.accounts import with_configured
from xce.auth.audit import AuditLog
from xce.auth.backends import OidcBackend, PasswordBackend, Principal, build_backend
from xce.auth.backends.base import AuthDenied, BackendUnavailable
from xce.auth.files import atomic_write
from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService
from xce.config.auth import AuthSettings
from xce.core.rbac import RoleMap

if TYPE_CHECKING:
    from xce.auth.backends.munge import MungeBackend

log = logging.getLogger("xce.auth")
MIN_LOGIN_FAILURE_S = 0.2


@dataclass(frozen=True)
class Session:
    """What a login (or service-token creation) hands back to the client."""

    token: str
    expires_at: float
    user: str
    groups: tuple[str, ...]
    roles: tuple[str, ...]
    permissions: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "expires_at": self.expires_at,
            "user": self.user,
            "groups": list(self.groups),
            "roles": list(self.roles),
            "permissions": sorted(self.permissions),
        }


class GroupDirectory:
    """user -> groups, for group-scoped job access: backends that can list a user's groups
    answer first; otherwise the groups seen at the user's last login (kept durably)."""

    def __init__(self, path: Path, backends: Iterable[Any]) -> None:
        self.path = path
        self.backends = [b for b in backends if hasattr(b, "groups_of")]
        self.seen: dict[str, tuple[str, ...]] = {}
        if path.exists():
            self.seen = {u: tuple(g) for u, g in json.loads(path.read_text()).items()}

    def groups_of(self, user: str) -> tuple[str, ...]:
        for backend in self.backends:
            groups = backend.groups_of(user)
            if groups:
                return tuple(groups)
        return self.seen.get(user, ())

    def remember(self, user: str, groups: tuple[str, ...]) -> None:
        if self.seen.get(user) != groups:
            self.seen[user] = groups
            atomic_write(
                self.path, json.dumps({u: list(g) for u, g in self.seen.items()}, indent=1).encode()
            )


class AuthRuntime:
    def __init__(
        self,
        settings: AuthSettings,
        state_dir: Path,
        backends: list[Any] | None = None,
        audit_relaxed_s: float | None = None,
    ) -> None:
        """`audit_relaxed_s`: how late an accepted submission's audit record may be written
        (`AuditLog.relaxed_s`; the controller passes its WAL's fsync interval under
        `wal_fsync = "interval"`, None otherwise)."""
        self.settings = settings
        self.roles: RoleMap = settings.roles
        folder = key_dir(state_dir)
        self.tokens = TokenService.open(
            folder,
            settings.issuer,
            settings.audience,
            settings.token_ttl_s,
            settings.service_token_ttl_s,
        )
        if backends is None:
            backends = [
                build_backend(dict(section), settings.base, f"auth.backend[{i}]")
                for i, section in enumerate(settings.backends)
            ]
        self.backends = backends
        self.directory = GroupDirectory(folder / "groups.json", backends)
        self.audit = AuditLog(state_dir / "audit.log", audit_relaxed_s)

    # --- who is calling -----------------------------------------------------------------

    def permissions(self, roles: Iterable[str]) -> frozenset[str]:
        return self.roles.permissions(roles)

    def roles_for(self, principal: Principal) -> tuple[str, ...]:
        direct: list[str] = []
        for backend in self.backends:
            roles_of = getattr(backend, "roles_of", None)
            if roles_of is not None and getattr(backend, "name", "") == principal.backend:
                direct.extend(roles_of(principal.user))
        return self.roles.roles_for(principal.groups, direct)

    # --- login --------------------------------------------------------------------------

    def password_backends(self) -> list[PasswordBackend]:
        return [b for b in self.backends if isinstance(b, PasswordBackend)]

    def oidc_backend(self) -> OidcBackend | None:
        return next((b for b in self.backends if isinstance(b, OidcBackend)), None)

    def munge_backend(self) -> MungeBackend | None:
        from xce.auth.backends.munge import MungeBackend

        return next((b for b in self.backends if isinstance(b, MungeBackend)), None)

    @property
    def cluster_id(self) -> str:
        """What a MUNGE credential's payload must name (`aud`): the token issuer, which
        sites whose clusters share one MUNGE key set apart per cluster."""
        return self.settings.issuer

    async def munge_login(self, backend: MungeBackend, credential: str) -> Session:
        """A session for whoever made `credential`: the uid's account with its OS groups,
        plus the groups and roles the users file gives that name (as on the local socket,
        xce/api/peer.py), for the backend's `token_ttl_s`. Raises `AuthDenied`."""
        principal = await backend.authenticate_credential(credential, self.cluster_id)
        groups, direct = with_configured(self.backends, principal.user, principal.groups)
        principal = Principal(principal.user, groups, principal.backend)
        roles = self.roles.roles_for(groups, direct)
        return self.session_for(principal, roles=roles, ttl_s=backend.token_ttl_s)

    async def login(self, username: str, password: str) -> Session:
        """Try each password backend in order; `AuthDenied` when none accepts.

        A backend that cannot be reached is skipped; if no later backend accepts, the login
        fails with its `BackendUnavailable` (503), not as a wrong password. Unknown users and
        wrong passwords take the same path (each backend burns a hash for unknown users) and
        the failure is padded to a floor, so timing does not tell them apart."""
        started = time.monotonic()
        unavailable: BackendUnavailable | None = None
        for backend in self.password_backends():
            try:
                principal = await backend.authenticate(username, password)
            except AuthDenied:
                principal = None
            except BackendUnavailable as exc:
                log.warning(
                    "login backend %s unavailable: %s", getattr(backend, "name", "?"), exc.message
                )
                unavailable = unavailable or exc
                continue
            if principal is not None:
                return self.session_for(principal)
        await asyncio.sleep(max(0.0, MIN_LOGIN_FAILURE_S - (time.monotonic() - started)))
        if unavailable is not None:
            raise unavailable
        raise AuthDenied("wrong user name or password")

    def session_for(
        self,
        principal: Principal,
        kind: str = "user",
        roles: tuple[str, ...] | None = None,
        ttl_s: float | None = None,
    ) -> Session:
        """Issue a token for `principal` (`ttl_s`: the kind's default lifetime when None)."""
        roles = roles if roles is not None else self.roles_for(principal)
        if kind == "user":
            self.directory.remember(principal.user, principal.groups)
        token, expires = self.tokens.issue(
            principal.user, principal.groups, roles, kind, ttl_s=ttl_s
        )
        return Session(
            token, expires, principal.user, principal.groups, roles, self.permissions(roles)
        )
