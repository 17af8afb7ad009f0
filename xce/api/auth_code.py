"""Authorization code + PKCE login routes (the browser way; the device grant is in auth.py).

The controller is the OIDC client: `authorize` makes the state and S256 verifier, keeps
them (xce/auth/pending_logins.py; the controller's one store is the app's `LOGINS`) and
returns the provider URL; the CLI's loopback listener receives the redirect and posts code +
state to `code`, which exchanges the code with the kept verifier. The verifier never leaves
the controller, so an intercepted code is useless.
"""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from xce.api.auth import SessionView, _oidc, runtime
from xce.api.http import LOGINS, json_response, read_body
from xce.api.routes import Route
from xce.auth.backends.base import AuthDenied
from xce.auth.pending_logins import check_loopback_redirect
from xce.protocol.auth import Authorize, Code


class AuthorizationView(Struct, kw_only=True):
    """`POST /api/v1/auth/authorize`: the provider URL to open in a browser and the state
    its redirect carries back."""

    authorization_url: str
    state: str


async def authorize(request: web.Request) -> web.Response:
    body = await read_body(request, Authorize)
    backend = _oidc(request)
    redirect_uri = check_loopback_redirect(body.redirect_uri)
    state, pending = request.app[LOGINS].start(redirect_uri)
    url = await backend.authorization_url(redirect_uri, state, pending.code_verifier)
    return json_response({"authorization_url": url, "state": state})


async def code(request: web.Request) -> web.Response:
    body = await read_body(request, Code)
    backend = _oidc(request)
    auth = runtime(request)
    pending = request.app[LOGINS].take(body.state)
    try:
        principal = await backend.exchange_code(
            body.code, pending.redirect_uri, pending.code_verifier
        )
    except AuthDenied as exc:
        await auth.audit.record(
            "-", "auth.code", "code", "denied", exc.message, request.remote or ""
        )
        raise
    session = auth.session_for(principal)
    await auth.audit.record(
        session.user, "auth.code", f"user:{session.user}", "ok", remote=request.remote or ""
    )
    return json_response(session.to_json())


ROUTES = [
    Route(
        "POST",
        "/api/v1/auth/authorize",
        authorize,
        "Start an OpenID Connect browser login (authorization code + PKCE) for a loopback "
        "redirect_uri; returns the provider URL and the state",
        "public",
        "auth",
        body=Authorize,
        response=AuthorizationView,
    ),
    Route(
        "POST",
        "/api/v1/auth/code",
        code,
        "Finish a browser login with the code and state from the redirect; returns a token",
        "public",
        "auth",
        body=Code,
        response=SessionView,
    ),
]
