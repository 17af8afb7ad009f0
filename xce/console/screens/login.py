"""Login: pick a controller from the candidate list, then a password, an OIDC device code
(shown as a URL and a code to type elsewhere), or a token pasted as is.

Coded against the auth API (`POST /api/v1/auth/login`, `/auth/device`, `/auth/device/token`);
a controller without it answers 404, which is shown as such with the token alternative.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static

from xce.client import ApiError, XceClient

if TYPE_CHECKING:
    from xce.console.app import XceTui


class LoginScreen(Screen[bool]):
    CSS_PATH = "login.tcss"
    BINDINGS = [Binding("escape", "cancel", "Quit")]

    def __init__(self, controllers: list[str]) -> None:
        super().__init__()
        self.controllers = controllers

    def compose(self) -> ComposeResult:
        with Vertical(id="login"):
            yield Label("XCE login", id="title")
            yield Select(
                [(c, c) for c in self.controllers],
                value=self.controllers[0],
                allow_blank=False,
                id="server",
            )
            yield Input(placeholder="user name", id="user")
            yield Input(placeholder="password", password=True, id="password")
            with Horizontal(classes="buttons"):
                yield Button("Log in", id="login-button", variant="primary")
                yield Button("Device code (SSO)", id="device")
            yield Input(placeholder="or paste a token and press Enter", password=True, id="token")
            yield Static("", id="message", markup=False)
        yield Footer()

    @property
    def client(self) -> XceClient:
        # only `XceTui` pushes this screen (xce/console/app.py), so its app is always one
        return cast("XceTui", self.app).client

    def _use_server(self) -> None:
        chosen = str(self.query_one("#server", Select).value)
        rest = [c for c in self.controllers if c != chosen]
        self.client.controllers = [chosen.rstrip("/"), *[c.rstrip("/") for c in rest]]
        self.client._current = 0

    def say(self, text: str) -> None:
        self.query_one("#message", Static).update(text)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self._use_server()
        if event.button.id == "login-button":
            self.run_worker(self._password(), group="login", exclusive=True)
        elif event.button.id == "device":
            self.run_worker(self._device(), group="login", exclusive=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._use_server()
        if event.input.id == "token":
            self.run_worker(self._token(event.value.strip()), group="login", exclusive=True)
        else:
            self.run_worker(self._password(), group="login", exclusive=True)

    async def _password(self) -> None:
        user = self.query_one("#user", Input).value.strip()
        password = self.query_one("#password", Input).value
        if not user or not password:
            self.say("! give a user name and a password")
            return
        self.say("logging in ...")
        try:
            await self.client.login(user, password)
        except ApiError as exc:
            self.say(self._explain(exc))
            return
        self.dismiss(True)

    async def _device(self) -> None:
        try:
            grant = await self.client.device_start()
        except ApiError as exc:
            self.say(self._explain(exc))
            return
        self.say(
            f"Open {grant.get('verification_uri_complete') or grant['verification_uri']}"
            f"\nand enter the code  {grant['user_code']}\nwaiting ..."
        )
        interval = float(grant.get("interval", 5))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(grant.get("expires_in", 600))
        while loop.time() < deadline:
            await asyncio.sleep(interval)
            try:
                await self.client.device_token(grant["device_code"])
            except ApiError as exc:
                if exc.code == "authorization_pending":
                    continue
                if exc.code == "slow_down":
                    interval += 5
                    continue
                self.say(self._explain(exc))
                return
            self.dismiss(True)
            return
        self.say("! the device code expired; try again")

    async def _token(self, token: str) -> None:
        if not token:
            return
        self.client.set_token(token)
        try:
            await self.client.cluster()
        except ApiError as exc:
            self.say(self._explain(exc))
            return
        self.dismiss(True)

    @staticmethod
    def _explain(exc: ApiError) -> str:
        if exc.status == 404:
            return (
                "! this controller has no login endpoint (404); paste a token below "
                "or set XCE_TOKEN"
            )
        return f"! {exc.status or 'no answer'}: {exc.message}"

    def action_cancel(self) -> None:
        self.dismiss(False)
