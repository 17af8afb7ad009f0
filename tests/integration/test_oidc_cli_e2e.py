"""`xce login --device` and `xce login --browser` end to end: the CLI runs as a subprocess
against a real controller whose OIDC backend is the real provider (tests/auth_backends/oidc.py);
the test plays the user at the browser (tests/auth_backends/browser.py) while the CLI waits,
and the token the CLI saves must then work for `xce whoami`."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.auth_backends import test_oauth2_backend
from tests.auth_backends.browser import Browser
from tests.auth_backends.oidc import REDIRECT_URI, node_available
from tests.integration.cluster import Cluster
from tests.integration.test_auth_e2e import Shell
from tests.integration.test_login_backends_e2e import GROUPS, oidc_backend, refused

env = test_oauth2_backend.env  # oidc-provider: Env(provider, ca_file)
pytestmark = pytest.mark.skipif(node_available() is not None, reason=str(node_available()))
URL = re.compile(r"https?://\S+")


@pytest.fixture(scope="module")
def oidc_cluster(env: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A controller whose only login backend is the provider (it logs everyone in as alice,
    groups hpc + physics; physics maps to group-admin)."""
    c = Cluster(tmp_path_factory.mktemp("oidc-cli") / "cluster")
    c.extra_auth = GROUPS + oidc_backend(env)
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


class Cli:
    """`python -m xce ARGS` running in the background; its stdout read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, shell: Shell, *args: str) -> Cli:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "xce",
            *args,
            env={**shell.env, "PYTHONUNBUFFERED": "1"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def url_after(self, prefix: str, timeout: float = 30) -> str:
        """The first URL on a stdout line that starts with `prefix`."""
        assert self.proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), timeout)).decode()
            assert line, f"the CLI ended before printing {prefix!r}: {self.lines}"
            self.lines.append(line)
            if line.startswith(prefix):
                found = URL.search(line)
                assert found, line
                return found.group(0)

    async def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        return self.proc.returncode or 0, "".join(self.lines) + out.decode(), err.decode()

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


def assert_logged_in_as_alice(shell: Shell, out: str) -> None:
    assert "Logged in as alice (roles group-admin)" in out, out
    assert shell.token_file.stat().st_mode & 0o777 == 0o600
    who = json.loads(shell.ok("whoami", "--json"))
    assert (who["user"], who["kind"], who["groups"], who["roles"]) == (
        "alice",
        "user",
        ["hpc", "physics"],
        ["group-admin"],
    )


async def test_login_device_through_the_cli(oidc_cluster: Cluster, env: Any) -> None:
    shell = Shell(oidc_cluster, "device-alice")
    cli = await Cli.start(shell, "login", "--device")
    browser = Browser(env.ca_file)
    try:
        first = await cli.url_after("To sign in, open ")
        assert first.startswith(env.provider.issuer)
        assert re.search(r"enter the code \S+", cli.lines[-1]), cli.lines
        complete = await cli.url_after("or open ")
        # The CLI is polling now; the user confirms at the provider meanwhile.
        assert "Sign-in Success" in await browser.confirm_device(complete)
        code, out, err = await cli.finish()
        assert code == 0, (out, err)
        assert_logged_in_as_alice(shell, out)
    finally:
        cli.kill()
        await browser.close()


async def test_login_device_denied_is_one_line(oidc_cluster: Cluster, env: Any) -> None:
    shell = Shell(oidc_cluster, "device-denied")
    cli = await Cli.start(shell, "login", "--device")
    browser = Browser(env.ca_file)
    try:
        await browser.confirm_device(await cli.url_after("or open "), approve=False)
        code, out, err = await cli.finish()
        assert code == 1, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "denied at the identity provider" in lines[0], err
        assert not shell.token_file.exists()
    finally:
        cli.kill()
        await browser.close()


# --- authorization code + PKCE ----------------------------------------------------------


def redirect_of(authorization_url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorization_url).query)
    return query["redirect_uri"][0]


async def test_login_browser_through_the_cli(oidc_cluster: Cluster, env: Any) -> None:
    shell = Shell(oidc_cluster, "browser-alice")
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        shell.env.pop(var, None)
    cli = await Cli.start(shell, "login", "--browser", "--timeout", "60")
    browser = Browser(env.ca_file)
    try:
        url = await cli.url_after("To sign in, open ")
        assert url.startswith(env.provider.issuer)
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
        assert "code_verifier" not in query
        redirect_uri = redirect_of(url)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/xce/callback", redirect_uri)
        answer = await browser.authorize(url, redirect_uri)
        assert answer["code"] and answer["state"] == query["state"][0]
        # The browser's last hop: the provider's redirect lands on the CLI's listener.
        async with aiohttp.ClientSession() as plain, plain.get(redirect_uri, params=answer) as page:
            assert page.status == 200 and "you may close this page" in await page.text()
        code, out, err = await cli.finish()
        assert code == 0, (out, err)
        assert_logged_in_as_alice(shell, out)
        # The state was single use: the same redirect replayed is refused.
        replay = refused(
            oidc_cluster,
            "POST",
            "/api/v1/auth/code",
            {"state": answer["state"], "code": answer["code"]},
        )
        assert (replay.status, replay.body["error"]["code"]) == (400, "invalid_request")
    finally:
        cli.kill()
        await browser.close()


async def test_code_route_state_is_single_use(oidc_cluster: Cluster, env: Any) -> None:
    c = oidc_cluster
    redirect_uri = REDIRECT_URI  # loopback, as the provider's client registration names it
    start = c.post("/api/v1/auth/authorize", {"redirect_uri": redirect_uri}, token=None)
    assert redirect_of(start["authorization_url"]) == redirect_uri
    browser = Browser(env.ca_file)
    try:
        answer = await browser.authorize(start["authorization_url"], redirect_uri)
    finally:
        await browser.close()
    body = {"state": start["state"], "code": answer["code"]}
    session = c.post("/api/v1/auth/code", body, token=None)
    assert (session["user"], session["roles"]) == ("alice", ["group-admin"])
    assert c.get("/api/v1/auth/whoami", token=session["token"])["user"] == "alice"
    reused = refused(c, "POST", "/api/v1/auth/code", body)
    assert (reused.status, reused.body["error"]["code"]) == (400, "invalid_request")
    unknown = refused(c, "POST", "/api/v1/auth/code", {"state": "made-up", "code": "x"})
    assert (unknown.status, unknown.body["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://evil.example/xce/callback",
        "https://127.0.0.1:8443/xce/callback",
        "http://127.0.0.2/xce/callback",
        "http://user@127.0.0.1/cb",
        "http://127.0.0.1.evil.example/cb",
        "javascript:alert(1)",
        "not a url",
    ],
)
def test_authorize_refuses_non_loopback_redirects(oidc_cluster: Cluster, redirect_uri: str) -> None:
    failure = refused(
        oidc_cluster, "POST", "/api/v1/auth/authorize", {"redirect_uri": redirect_uri}
    )
    assert (failure.status, failure.body["error"]["code"]) == (400, "invalid_request")
    assert (
        "loopback" in failure.body["error"]["message"] or "URL" in failure.body["error"]["message"]
    )
