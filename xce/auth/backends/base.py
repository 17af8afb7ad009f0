"""The small protocols every login backend implements, and what they return.

A backend only answers "who is this?": it turns credentials (a password, or an OpenID Connect
flow) into a `Principal` (user name and groups). Mapping groups to roles and permissions is
RBAC's job (`xce.core.rbac`), and issuing XCE's own JWT is `xce.auth.tokens`' job, so every
backend stays small and testable against its real server alone.

Backends that talk to blocking libraries (ldap3, python-pam) run them in threads of their
own (`blocking_pool`), so the controller's event loop never waits on a directory server, and a
directory that hangs never takes the threads everything else needs.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from xce.core.errors import Unauthorized, XceError


class AuthDenied(Unauthorized):
    """The credentials are wrong, the user is unknown or the flow was denied/expired."""

    code = "auth_denied"


class BackendUnavailable(XceError):
    """The backend's server cannot be reached or answered with an error (not the user's fault)."""

    code = "auth_backend_unavailable"
    http_status = 503


def blocking_pool(kind: str, threads: int = 8) -> ThreadPoolExecutor:
    """Threads for one backend's blocking calls. A directory that accepts connections but
    never answers holds each login's thread until its timeout (and PAM sleeps after a wrong
    password by design): in these threads that only queues that backend's own logins. In
    asyncio's default executor, which password hashing (users file) and the audit log share,
    a dozen logins against a hung LDAP server held a users-file login for 19 s."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"xce-auth-{kind}")


@dataclass(frozen=True)
class Principal:
    """Who a backend says the caller is: a user name and the groups it belongs to."""

    user: str
    groups: tuple[str, ...] = ()
    backend: str = ""


@runtime_checkable
class PasswordBackend(Protocol):
    """A backend that checks a user name and password (configfile, ldap, pam)."""

    name: str

    async def authenticate(self, username: str, password: str) -> Principal | None:
        """The principal, or None when this backend does not know the user or the password
        is wrong (the next backend in the configured order is then tried). Raises
        `BackendUnavailable` when the backend's server cannot be asked."""
        ...


@dataclass(frozen=True)
class DeviceAuthorization:
    """The first answer of an RFC 8628 device authorization grant, shown to the user."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int


@runtime_checkable
class OidcBackend(Protocol):
    """An OpenID Connect provider: device grant for terminals, code + PKCE for browsers."""

    name: str

    async def start_device_flow(self) -> DeviceAuthorization: ...

    async def poll_device_flow(self, device_code: str) -> Principal | None:
        """None while the user has not finished (authorization_pending / slow_down); raises
        `AuthDenied` when the user refused or the code expired."""
        ...

    async def authorization_url(self, redirect_uri: str, state: str, code_verifier: str) -> str: ...

    async def exchange_code(
        self, code: str, redirect_uri: str, code_verifier: str
    ) -> Principal: ...

    async def principal_from_token(self, token: str) -> Principal:
        """Verify an ID token from the provider (signature by JWKS, iss, aud, exp) and map
        its claims; raises `AuthDenied`."""
        ...
