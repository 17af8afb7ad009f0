"""The OpenID Connect logins of `xce login`: `--device` (RFC 8628, for SSH sessions with no
browser) and `--browser` (authorization code + PKCE through a loopback redirect).

Both end with an ordinary XCE session from the controller, which is the OIDC client: the CLI
never sees a provider token, only the XCE JWT it saves like a password login.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import typer

from xce.client import ApiError, XceClient
from xce.core.errors import XceError

Echo = Callable[[str], None]
Sleep = Callable[[float], Awaitable[None]]
SLOW_DOWN_STEP_S = 5  # RFC 8628 3.5: each slow_down adds 5 s to the polling interval


class LoginFailed(XceError):
    """A login the user cannot finish this way; the message is the CLI's one line."""

    code = "login_failed"


def no_oidc(exc: ApiError) -> LoginFailed:
    """A 404 from the auth routes means the controller has no OIDC backend configured."""
    return LoginFailed(
        "the controller has no OpenID Connect backend ([[auth.backend]] type "
        "oauth2); log in with a user name and password instead"
    )


async def device_login(
    client: XceClient, echo: Echo = typer.echo, sleep: Sleep = asyncio.sleep
) -> dict[str, Any]:
    """Start a device grant, show where to sign in, poll until the user has; the session."""
    try:
        grant = await client.device_start()
    except ApiError as exc:
        raise no_oidc(exc) if exc.status == 404 else exc from None
    echo(f"To sign in, open {grant['verification_uri']} and enter the code {grant['user_code']}")
    if grant.get("verification_uri_complete"):
        echo(f"or open {grant['verification_uri_complete']}")
    echo("Waiting for the sign-in to complete...")
    interval = float(grant.get("interval") or 5)
    deadline = time.monotonic() + float(grant.get("expires_in") or 600)
    while True:
        await sleep(interval)
        try:
            return await client.device_token(grant["device_code"])
        except ApiError as exc:
            if exc.code == "authorization_pending" and time.monotonic() < deadline:
                continue
            if exc.code == "slow_down":
                interval += SLOW_DOWN_STEP_S
                continue
            if exc.code in ("expired_token", "authorization_pending"):
                raise LoginFailed(
                    "the device code expired before the sign-in was completed; "
                    "run `xce login --device` again"
                ) from None
            if exc.code == "access_denied":
                raise LoginFailed(
                    f"the sign-in was denied at the identity provider: {exc.message}"
                ) from None
            if exc.status == 404:
                raise no_oidc(exc) from None
            raise
