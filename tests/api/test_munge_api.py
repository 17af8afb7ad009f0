"""`GET|POST /api/v1/auth/munge` in the real app, against a real munged: the token it issues,
the audit trail, the refusals, and the 404 of a controller without a munge backend."""

from __future__ import annotations

import os
import pwd
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.api.conftest import Api, make_settings, start_api
from tests.auth_backends.munged import Munged, munge_available, new_key
from xce.api.http import AUTH
from xce.auth import munge
from xce.config.auth import parse_auth

MUNGE = "/api/v1/auth/munge"


@pytest.fixture(scope="module")
def munged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Munged]:
    if not munge_available():
        pytest.skip("munged/libmunge not installed")
    daemon = Munged(new_key(tmp_path_factory.mktemp("munge-key")))
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
async def munge_api(munged: Munged, tmp_path: Path) -> AsyncIterator[Api]:
    settings = parse_auth(
        {
            "issuer": "physics-cluster",
            "backend": [{"type": "munge", "socket": munged.socket, "allow_root": True}],
        },
        tmp_path,
    )
    # The tokens of the test key folder are for issuer "xce": this app trusts only its own.
    running, client = await start_api(make_settings(tmp_path), tmp_path, auth_settings=settings)
    try:
        yield running
    finally:
        await client.close()


async def test_a_credential_buys_a_token(munge_api: Api, munged: Munged) -> None:
    info = await munge_api.call("GET", MUNGE, 200)
    assert info == {"audience": "physics-cluster", "ttl_s": 300.0}
    credential = munge.login_credential(info["audience"], munged.socket)
    session = await munge_api.call("POST", MUNGE, 200, json={"credential": credential})
    me = pwd.getpwuid(os.getuid()).pw_name
    assert session["user"] == me and session["roles"] == ["user"]
    who = await munge_api.call(
        "GET", "/api/v1/auth/whoami", 200, headers={"Authorization": f"Bearer {session['token']}"}
    )
    assert who["user"] == me
    again = await munge_api.call("POST", MUNGE, 401, json={"credential": credential})
    assert again["error"]["code"] == "auth_denied" and "replayed" in again["error"]["message"]
    other = munge.login_credential("xce", munged.socket)  # another cluster's name
    refused = await munge_api.call("POST", MUNGE, 401, json={"credential": other})
    assert "not this cluster" in refused["error"]["message"]
    lines = munge_api.app[AUTH].audit.path.read_text().splitlines()
    assert any('"auth.munge"' in x and '"ok"' in x and f'"user:{me}"' in x for x in lines)
    assert sum('"auth.munge"' in x and '"denied"' in x for x in lines) == 2


@pytest.mark.parametrize(
    "body",
    [{}, {"credential": ""}, {"credential": 5}, {"credential": "MUNGE:" + "A" * 5000 + ":"}],
)
async def test_malformed_bodies_are_400(munge_api: Api, body: object) -> None:
    await munge_api.call("POST", MUNGE, 400, json=body)


async def test_without_a_munge_backend_both_routes_are_404(secured: Api) -> None:
    await secured.call("GET", MUNGE, 404)
    error = await secured.call("POST", MUNGE, 404, json={"credential": "MUNGE:AAAA:"})
    assert "no MUNGE backend" in error["error"]["message"]
