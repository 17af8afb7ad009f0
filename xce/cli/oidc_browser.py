"""`xce login --browser`: authorization code + PKCE through a one-shot loopback listener
(RFC 8252 7.3).

The controller makes the state and verifier and returns the provider URL for our
http://127.0.0.1:PORT/xce/callback; the browser comes back there with code + state, which
we hand to the controller. We only accept the state the controller gave us, so a page that
sends the browser to our port with someone else's code cannot log us in as them.
"""

from __future__ import annotations

import asyncio
import os
import webbrowser
from typing import Any

import typer
from aiohttp import web

from xce.cli.oidc_login import Echo, LoginFailed, no_oidc
from xce.client import ApiError, XceClient

CALLBACK_PATH = "/xce/callback"  # the path the provider's client registration names
DONE_PAGE = "Signed in to XCE; you may close this page.\n"


def can_open_browser() -> bool:
    """Only with a display or an explicit $BROWSER: over SSH, webbrowser would start a text
    browser in our terminal or fail noisily, and the printed URL is enough."""
    return any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))


class Callback:
    """The loopback listener: resolves `answer` with the redirect's query parameters once a
    request carries our state (or an error from the provider)."""

    def __init__(self) -> None:
        self.state = ""
        self.answer: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
        app = web.Application()
        app.router.add_get(CALLBACK_PATH, self.handle)
        self.runner = web.AppRunner(app, access_log=None)

    async def start(self) -> str:
        """Listen on a free port of 127.0.0.1; the redirect_uri to register."""
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{port}{CALLBACK_PATH}"

    async def handle(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        if query.get("state") != self.state or self.answer.done():
            return web.Response(status=400, text="Not the sign-in XCE is waiting for.\n")
        self.answer.set_result(query)
        if "error" in query:
            return web.Response(status=400, text="Sign-in failed; see the terminal.\n")
        return web.Response(text=DONE_PAGE)

    async def close(self) -> None:
        await self.runner.cleanup()


async def browser_login(
    client: XceClient, wait_s: float = 300, echo: Echo = typer.echo
) -> dict[str, Any]:
    """Run the whole browser login; the XCE session the controller answers."""
    callback = Callback()
    redirect_uri = await callback.start()
    try:
        try:
            start = await client.request(
                "POST", "/api/v1/auth/authorize", json={"redirect_uri": redirect_uri}
            )
        except ApiError as exc:
            raise no_oidc(exc) if exc.status == 404 else exc from None
        callback.state = start["state"]
        echo(f"To sign in, open {start['authorization_url']}")
        if can_open_browser():
            webbrowser.open(start["authorization_url"])
        echo(f"Waiting up to {wait_s:.0f} s for the browser to come back to {redirect_uri}...")
        try:
            answer = await asyncio.wait_for(asyncio.shield(callback.answer), wait_s)
        except TimeoutError:
            raise LoginFailed(
                f"the browser did not come back within {wait_s:.0f} s; run "
                "`xce login --browser` again"
            ) from None
        if "error" in answer:
            raise LoginFailed(
                "the identity provider refused the sign-in: "
                f"{answer.get('error_description') or answer['error']}"
            )
        if not answer.get("code"):
            raise LoginFailed("the browser came back without an authorization code")
        session: dict[str, Any] = await client.request(
            "POST", "/api/v1/auth/code", json={"state": answer["state"], "code": answer["code"]}
        )
        return session
    finally:
        await callback.close()
