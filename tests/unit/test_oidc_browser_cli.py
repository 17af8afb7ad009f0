"""`xce login --browser`'s loopback listener against a scripted controller: only the state
the controller issued is accepted (a forged redirect to our port gets a 400 and we keep
waiting), a provider error and a browser that never returns end in one LoginFailed line."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import aiohttp
import pytest

from xce.cli import oidc_browser
from xce.cli.oidc_browser import browser_login
from xce.cli.oidc_login import LoginFailed
from xce.client import ApiError

SESSION = {"token": "t", "user": "alice", "roles": ["user"], "expires_at": 0.0}


class Scripted:
    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.redirect_uri = ""

    async def request(self, method: str, path: str, json: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((path, json))
        if path.endswith("/authorize"):
            self.redirect_uri = json["redirect_uri"]
            return {"authorization_url": "https://idp.example/auth?x=1", "state": "good"}
        if path.endswith("/code"):
            return SESSION
        raise ApiError(404, "not_found", path)


async def visit(client: Scripted, said: list[str], **query: str) -> tuple[int, str]:
    while not said:
        await asyncio.sleep(0.01)
    url = client.redirect_uri + "?" + urllib.parse.urlencode(query)
    async with aiohttp.ClientSession() as s, s.get(url) as page:
        return page.status, await page.text()


@pytest.fixture(autouse=True)
def no_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oidc_browser, "can_open_browser", lambda: False)


async def test_only_our_state_is_accepted() -> None:
    client, said = Scripted(), []
    login = asyncio.create_task(browser_login(client, 10, said.append))  # type: ignore[arg-type]
    assert (await visit(client, said, code="evil", state="forged"))[0] == 400
    status, text = await visit(client, said, code="c0de", state="good")
    assert status == 200 and "you may close this page" in text
    assert await login == SESSION
    assert client.posts[-1] == ("/api/v1/auth/code", {"state": "good", "code": "c0de"})
    assert client.redirect_uri.startswith("http://127.0.0.1:")
    assert "https://idp.example/auth?x=1" in said[0]


async def test_provider_error_is_one_line() -> None:
    client, said = Scripted(), []
    login = asyncio.create_task(browser_login(client, 10, said.append))  # type: ignore[arg-type]
    await visit(client, said, error="access_denied", error_description="user said no", state="good")
    with pytest.raises(LoginFailed, match="refused the sign-in: user said no"):
        await login
    assert [p for p, _ in client.posts] == ["/api/v1/auth/authorize"]


async def test_timeout() -> None:
    with pytest.raises(LoginFailed, match="did not come back within 0 s"):
        await browser_login(Scripted(), 0.2, lambda _: None)  # type: ignore[arg-type]
