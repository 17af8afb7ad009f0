"""The authorization code + PKCE routes, dispatch only (the real provider is in
tests/integration/test_oidc_cli_e2e.py): the verifier the controller exchanges with is the
one whose S256 challenge went into the authorization URL, it never leaves the controller,
and a state works once."""

from __future__ import annotations

import urllib.parse

from xce.api.http import AUTH
from xce.auth.backends.base import AuthDenied, Principal
from xce.auth.backends.oauth2 import pkce_challenge

from .conftest import Api
from .test_login import FakeOidc

REDIRECT = "http://127.0.0.1:5555/xce/callback"


class FakeCodeOidc(FakeOidc):
    """Plays the provider's side of PKCE: remembers each state's challenge and redirect."""

    def __init__(self) -> None:
        super().__init__()
        self.issued: dict[str, tuple[str, str]] = {}  # code -> (challenge, redirect_uri)
        self.verifiers: list[str] = []

    async def authorization_url(self, redirect_uri: str, state: str, code_verifier: str) -> str:
        self.issued[f"code-for-{state}"] = (pkce_challenge(code_verifier), redirect_uri)
        query = urllib.parse.urlencode(
            {
                "redirect_uri": redirect_uri,
                "state": state,
                "code_challenge": pkce_challenge(code_verifier),
            }
        )
        return f"https://idp.example/auth?{query}"

    async def exchange_code(self, code: str, redirect_uri: str, code_verifier: str) -> Principal:
        self.verifiers.append(code_verifier)
        challenge, registered = self.issued.pop(code, ("", ""))
        if pkce_challenge(code_verifier) != challenge or redirect_uri != registered:
            raise AuthDenied("invalid_grant")
        return Principal("olivia", ("physics",), self.name)


async def test_code_routes_without_a_provider_are_404(api: Api) -> None:
    for path, body in (
        ("/api/v1/auth/authorize", {"redirect_uri": REDIRECT}),
        ("/api/v1/auth/code", {"state": "s", "code": "c"}),
    ):
        got = await api.call("POST", path, 404, json=body)
        assert "OpenID Connect" in got["error"]["message"]


async def test_authorize_then_code_once(tenants: Api) -> None:
    fake = FakeCodeOidc()
    tenants.app[AUTH].backends.append(fake)
    start = await tenants.call(
        "POST", "/api/v1/auth/authorize", 200, json={"redirect_uri": REDIRECT}
    )
    assert set(start) == {"authorization_url", "state"}  # no verifier handed out
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(start["authorization_url"]).query)
    assert query["state"] == [start["state"]] and query["redirect_uri"] == [REDIRECT]
    body = {"state": start["state"], "code": f"code-for-{start['state']}"}
    done = await tenants.call("POST", "/api/v1/auth/code", 200, json=body)
    assert (done["user"], done["groups"], done["roles"]) == ("olivia", ["physics"], ["user"])
    assert pkce_challenge(fake.verifiers[0]) == query["code_challenge"][0]
    reused = await tenants.call("POST", "/api/v1/auth/code", 400, json=body)
    assert reused["error"]["code"] == "invalid_request"
    assert len(fake.verifiers) == 1  # the provider was not asked


async def test_a_refused_code_is_401_and_spends_the_state(tenants: Api) -> None:
    tenants.app[AUTH].backends.append(FakeCodeOidc())
    start = await tenants.call(
        "POST", "/api/v1/auth/authorize", 200, json={"redirect_uri": REDIRECT}
    )
    body = {"state": start["state"], "code": "a-code-from-elsewhere"}
    assert (await tenants.call("POST", "/api/v1/auth/code", 401, json=body))["error"][
        "code"
    ] == "auth_denied"
    await tenants.call("POST", "/api/v1/auth/code", 400, json=body)


async def test_authorize_refuses_other_redirects(tenants: Api) -> None:
    tenants.app[AUTH].backends.append(FakeCodeOidc())
    for uri in ("https://evil.example/cb", "http://192.168.1.5:80/cb", "http://127.0.0.1/cb#x"):
        got = await tenants.call("POST", "/api/v1/auth/authorize", 400, json={"redirect_uri": uri})
        assert "loopback" in got["error"]["message"]
