"""The console's login screen against a real controller: a users-file password (wrong, then
right) and the OIDC device code against the real provider, the test playing the user at the
browser while the console polls."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, Static

from tests.auth_backends import test_oauth2_backend
from tests.auth_backends.browser import Browser
from tests.auth_backends.oidc import node_available
from tests.integration.cluster import Cluster
from tests.integration.test_login_backends_e2e import (
    FILE_PASSWORDS,
    GROUPS,
    oidc_backend,
    users_file,
)
from tests.tui.helpers import until
from xce.console.app import XceTui
from xce.console.screens.login import LoginScreen

env = test_oauth2_backend.env  # oidc-provider: Env(provider, ca_file)


def message(app: XceTui) -> str:
    return str(app.screen.query_one("#message", Static).render())


async def test_password_login_from_the_console(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    c.extra_auth = GROUPS + users_file(c.root)
    c.start_controller()
    try:
        app = XceTui([c.url], None)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, LoginScreen), "the login screen")
            app.screen.query_one("#user", Input).value = "carol"
            app.screen.query_one("#password", Input).value = "not-her-password"
            await pilot.click("#login-button")
            await until(pilot, lambda: "401" in message(app), "the refusal")
            assert "not-her-password" not in message(app)
            app.screen.query_one("#password", Input).value = FILE_PASSWORDS["carol"]
            await pilot.click("#login-button")
            await until(pilot, lambda: app.connection == "ok", "connected as carol")
            assert not isinstance(app.screen, LoginScreen)
            who = await app.client.whoami()
            assert who["user"] == "carol" and "chemistry" in who["groups"]
    finally:
        c.stop()


@pytest.mark.skipif(node_available() is not None, reason=str(node_available()))
async def test_device_code_login_from_the_console(tmp_path: Path, env: Any) -> None:
    c = Cluster(tmp_path / "cluster")
    c.extra_auth = GROUPS + oidc_backend(env)
    c.start_controller()
    browser = Browser(env.ca_file)
    try:
        app = XceTui([c.url], None)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, LoginScreen), "the login screen")
            app.screen.query_one("#device", Button).press()
            await until(pilot, lambda: "enter the code" in message(app), "the device code")
            shown = message(app)
            url = re.search(r"Open (\S+)", shown)
            code = re.search(r"enter the code\s+(\S+)", shown)
            assert url and code and url.group(1).startswith(env.provider.issuer), shown
            # The console polls meanwhile; the user confirms at the provider elsewhere.
            assert "Sign-in Success" in await browser.confirm_device(url.group(1))
            await until(
                pilot, lambda: app.connection == "ok", "connected after the grant", timeout=60
            )
            who = await app.client.whoami()
            assert who["user"] == "alice"
    finally:
        await browser.close()
        c.stop()
