"""Identity routes: login, whoami, the OIDC device grant, MUNGE, service tokens, revocation,
keys.

Login answers the same 401 for an unknown user and a wrong password, after the same work
(see `AuthRuntime.login`), and every attempt lands in the audit log. The device routes hand
the RFC 8628 flow to the first configured OIDC backend and answer 404 `no_oidc_backend` when
there is none. A MUNGE login (`POST /auth/munge`) trades a credential from the caller's node
for a short-lived token; `GET /auth/munge` tells clients what the credential must carry, and
both answer 404 without a munge backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from msgspec import Struct

from xce.api.http import AUTH, identity, json_response, read_body
from xce.api.routes import Route
from xce.auth.backends.base import AuthDenied, OidcBackend
from xce.auth.runtime import AuthRuntime
from xce.core.errors import NotFound, XceError
from xce.protocol.auth import DeviceToken, Login, MungeLogin, Revoke, ServiceToken

if TYPE_CHECKING:
    from xce.auth.backends.munge import MungeBackend


class SessionView(Struct, kw_only=True):
    """A login's answer: the bearer token, when it expires (seconds since the epoch) and
    who it belongs to."""  # built by Session.to_json (xce/auth/runtime.py)

    token: str
    expires_at: float
    user: str
    groups: list[str]
    roles: list[str]
    permissions: list[str]


class MungeInfo(Struct, kw_only=True):
    """`GET /api/v1/auth/munge`: the `aud` a login credential's payload must name, and the
    most seconds its `ts` may be off the controller's clock."""

    audience: str
    ttl_s: float


DEVICE_CODES = ("authorization_pending", "slow_down", "expired_token", "access_denied")


def runtime(request: web.Request) -> AuthRuntime:
    return request.app[AUTH]


class DeviceFlowError(XceError):
    """An RFC 8628 polling answer other than success (400 with the RFC's error code)."""

    http_status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def login(request: web.Request) -> web.Response:
    body = await read_body(request, Login)
    auth = runtime(request)
    username = body.username
    try:
        session = await auth.login(username, body.password)
    except AuthDenied:
        await auth.audit.record(
            username, "auth.login", f"user:{username}", "denied", remote=request.remote or ""
        )
        raise
    await auth.audit.record(
        session.user, "auth.login", f"user:{session.user}", "ok", remote=request.remote or ""
    )
    return json_response(session.to_json())


def _munge(request: web.Request) -> MungeBackend:
    backend = runtime(request).munge_backend()
    if backend is None:
        raise NotFound(
            "no MUNGE backend is configured ([[auth.backend]] type munge); log in with a "
            "user name and password instead"
        )
    return backend


async def munge_info(request: web.Request) -> web.Response:
    """What a MUNGE login credential must carry: the cluster's name (`aud`) and how old it
    may be. Public: a client asks before it has any token."""
    backend = _munge(request)
    return json_response({"audience": runtime(request).cluster_id, "ttl_s": backend.ttl_s})


async def munge_login(request: web.Request) -> web.Response:
    body = await read_body(request, MungeLogin)
    auth = runtime(request)
    backend = _munge(request)
    try:
        session = await auth.munge_login(backend, body.credential)
    except AuthDenied as exc:
        uid = getattr(exc, "uid", None)
        await auth.audit.record(
            "-",
            "auth.munge",
            f"uid:{uid}" if uid is not None else "credential",
            "denied",
            exc.message,
            request.remote or "",
        )
        raise
    await auth.audit.record(
        session.user, "auth.munge", f"user:{session.user}", "ok", remote=request.remote or ""
    )
    return json_response(session.to_json())


async def whoami(request: web.Request) -> web.Response:
    return json_response(identity(request).to_json())


def _oidc(request: web.Request) -> OidcBackend:
    backend = runtime(request).oidc_backend()
    if backend is None:
        raise NotFound(
            "no OpenID Connect backend is configured ([[auth.backend]] type "
            "oauth2); log in with a user name and password instead"
        )
    return backend


async def device_start(request: web.Request) -> web.Response:
    grant = await _oidc(request).start_device_flow()
    return json_response(
        {
            "device_code": grant.device_code,
            "user_code": grant.user_code,
            "verification_uri": grant.verification_uri,
            "verification_uri_complete": grant.verification_uri_complete,
            "expires_in": grant.expires_in,
            "interval": grant.interval,
        }
    )


async def device_token(request: web.Request) -> web.Response:
    body = await read_body(request, DeviceToken)
    backend = _oidc(request)
    auth = runtime(request)
    try:
        principal = await backend.poll_device_flow(body.device_code)
    except AuthDenied as exc:
        code = exc.code if exc.code in DEVICE_CODES else "access_denied"
        await auth.audit.record(
            "-", "auth.device", "device", "denied", exc.message, request.remote or ""
        )
        raise DeviceFlowError(code, exc.message) from None
    if principal is None:
        raise DeviceFlowError(
            "authorization_pending", "the user has not finished signing in yet; poll again"
        )
    session = auth.session_for(principal)
    await auth.audit.record(
        session.user, "auth.device", f"user:{session.user}", "ok", remote=request.remote or ""
    )
    return json_response(session.to_json())


async def service_token(request: web.Request) -> web.Response:
    body = await read_body(request, ServiceToken)
    auth = runtime(request)
    token, expires = auth.tokens.issue(
        body.name,
        (),
        (body.role,),
        "service",
        ttl_s=body.ttl_s,
        host=body.name if body.role == "worker" else None,
    )  # the worker's own host
    await auth.audit.record(
        identity(request).user,
        "token.create",
        f"service:{body.name}",
        "ok",
        f"role {body.role}",
        request.remote or "",
    )
    return json_response(
        {"token": token, "expires_at": expires, "user": body.name, "roles": [body.role]},
        status=201,
    )


async def revoke(request: web.Request) -> web.Response:
    body = await read_body(request, Revoke)
    auth = runtime(request)
    at = auth.tokens.revocations.revoke(body.user)
    await auth.audit.record(
        identity(request).user,
        "token.revoke",
        f"user:{body.user}",
        "ok",
        remote=request.remote or "",
    )
    return json_response({"user": body.user, "not_before": at})


async def rotate_key(request: web.Request) -> web.Response:
    auth = runtime(request)
    old = auth.tokens.keys.current_kid
    key = auth.tokens.keys.rotate()
    await auth.audit.record(
        identity(request).user,
        "key.rotate",
        f"key:{key.kid}",
        "ok",
        f"previous {old}",
        request.remote or "",
    )
    return json_response({"kid": key.kid, "previous": old})


ROUTES = [
    Route(
        "POST",
        "/api/v1/auth/login",
        login,
        "Log in with a user name and password (backends tried in order); returns a token",
        "public",
        "auth",
        body=Login,
        response=SessionView,
    ),
    Route(
        "GET",
        "/api/v1/auth/munge",
        munge_info,
        "What a MUNGE login credential must carry (the cluster's audience, its longest age)",
        "public",
        "auth",
        response=MungeInfo,
    ),
    Route(
        "POST",
        "/api/v1/auth/munge",
        munge_login,
        "Log in with a MUNGE credential made on a node of this cluster; returns a token",
        "public",
        "auth",
        body=MungeLogin,
        response=SessionView,
    ),
    Route(
        "GET",
        "/api/v1/auth/whoami",
        whoami,
        "Who the bearer token belongs to: user, groups, roles, permissions",
        "authenticated",
        "auth",
    ),
    Route(
        "POST",
        "/api/v1/auth/device",
        device_start,
        "Start an OpenID Connect device login (RFC 8628) with the configured provider",
        "public",
        "auth",
    ),
    Route(
        "POST",
        "/api/v1/auth/device/token",
        device_token,
        "Poll a device login; returns a token once the user has signed in",
        "public",
        "auth",
        body=DeviceToken,
        response=SessionView,
    ),
    Route(
        "POST",
        "/api/v1/auth/tokens",
        service_token,
        "Create a long-lived service token for a worker or standby",
        "user:admin",
        "auth",
        body=ServiceToken,
        ok_status=201,
    ),
    Route(
        "POST",
        "/api/v1/auth/revoke",
        revoke,
        "Revoke every token of a user or service issued until now",
        "user:admin",
        "auth",
        body=Revoke,
    ),
    Route(
        "POST",
        "/api/v1/auth/keys/rotate",
        rotate_key,
        "Rotate the token signing key (older tokens stay valid until they expire)",
        "cluster:admin",
        "auth",
    ),
]
