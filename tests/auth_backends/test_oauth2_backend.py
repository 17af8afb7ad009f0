"""The oauth2 backend against a real OpenID Connect provider (oidc-provider under Node.js,
HTTPS with the test's CA): discovery, JWKS, device grant, code + PKCE, and forged tokens."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from tests.auth_backends.browser import Browser
from tests.auth_backends.certs import issue_server_cert, make_ca
from tests.auth_backends.oidc import (
    CLIENT_ID,
    CLIENT_SECRET,
    CONFIDENTIAL_CLIENT_ID,
    QUICK_CLIENT_ID,
    REDIRECT_URI,
    OidcProvider,
    node_available,
    rsa_jwk,
)
from tests.auth_backends.slapd import free_port
from xce.auth.backends import AuthDenied, BackendUnavailable, OidcBackend, build_backend
from xce.auth.backends.oauth2 import OAuth2Backend, pkce_challenge
from xce.core.errors import ConfigError, InvalidRequest

pytestmark = pytest.mark.skipif(node_available() is not None, reason=str(node_available()))


@dataclass(frozen=True)
class Env:
    provider: OidcProvider
    root: Path
    ca_file: Path
    other_ca_file: Path
    cert_file: Path
    key_file: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("oidc")
    ca = make_ca(root / "pki", "OIDC test CA")
    other = make_ca(root / "other", "Untrusted CA")
    cert, key = issue_server_cert(ca, root / "pki", "provider")
    provider = OidcProvider(root, ca.cert_file, cert, key)
    provider.add_key("rsa-1")  # signs ID tokens (RS256 is the clients' default)
    provider.add_key("ec-1", "ES256")
    provider.start()
    try:
        yield Env(provider, root, ca.cert_file, other.cert_file, cert, key)
    finally:
        provider.stop()


@pytest.fixture
async def browser(env: Env) -> AsyncIterator[Browser]:
    b = Browser(env.ca_file)
    yield b
    await b.close()


def section(env: Env, **overrides: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "type": "oauth2",
        "issuer": env.provider.issuer,
        "client_id": CLIENT_ID,
        "ca_file": str(env.ca_file),
        "scopes": ["openid", "profile", "groups"],
        "timeout_s": 5,
    }
    s.update(overrides)
    return {k: v for k, v in s.items() if v is not None}


def backend(env: Env, **overrides: Any) -> OAuth2Backend:
    return build_backend(section(env, **overrides), env.root, "auth.backend[3]")


def forge(env: Env, kid: str = "rsa-1", alg: str = "RS256", key: Any = None, **claims: Any) -> str:
    """An ID token signed like the provider would (or with `key`), claims overridable."""
    now = int(time.time())
    body = {
        "iss": env.provider.issuer,
        "aud": CLIENT_ID,
        "sub": "alice-sub",
        "iat": now,
        "exp": now + 300,
        "preferred_username": "alice",
        "groups": ["hpc", "physics"],
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(
        body,
        key if key is not None else env.provider.keys[kid],
        algorithm=alg,
        headers={"kid": kid} if kid else None,
    )


# --- discovery and the positive paths ------------------------------------------------------


async def test_only_advertised_asymmetric_algorithms_are_allowed(env: Env) -> None:
    assert isinstance(backend(env), OidcBackend)
    b = backend(env)
    advertised = (await b.provider.metadata())["id_token_signing_alg_values_supported"]
    assert "HS256" in advertised  # the provider offers it ...
    assert await b.provider.allowed_algorithms() == {"RS256", "ES256"}  # ... we never take it


async def test_device_flow_logs_in(env: Env, browser: Browser) -> None:
    b = backend(env)
    started = await b.start_device_flow()
    assert started.user_code and started.interval == env.provider.device_interval
    assert started.verification_uri_complete.startswith(env.provider.issuer)
    assert await b.poll_device_flow(started.device_code) is None  # authorization_pending
    page = await browser.confirm_device(started.verification_uri_complete)
    assert "Sign-in Success" in page
    await asyncio.sleep(env.provider.device_interval)
    principal = await b.poll_device_flow(started.device_code)
    assert principal is not None
    assert (principal.user, principal.groups, principal.backend) == (
        "alice",
        ("hpc", "physics"),
        "oauth2",
    )
    with pytest.raises(AuthDenied):  # a device code is good for one login only
        await b.poll_device_flow(started.device_code)


async def test_polling_too_fast_gets_slow_down_and_backs_off(env: Env) -> None:
    first = backend(env)
    started = await first.start_device_flow()
    assert await first.poll_device_flow(started.device_code) is None
    # A poll within the interval: the backend keeps it from the provider ...
    assert await first.poll_device_flow(started.device_code) is None
    assert first.device_poll_interval(started.device_code) == env.provider.device_interval
    # ... a second controller that does not know the interval gets slow_down and backs off.
    second = backend(env)
    assert await second.poll_device_flow(started.device_code) is None
    assert second.device_poll_interval(started.device_code) == 5 + 5


async def test_denied_device_flow(env: Env, browser: Browser) -> None:
    b = backend(env)
    started = await b.start_device_flow()
    await browser.confirm_device(started.verification_uri_complete, approve=False)
    with pytest.raises(AuthDenied, match="denied"):
        await b.poll_device_flow(started.device_code)


async def test_expired_device_code(env: Env) -> None:
    b = backend(env, client_id=QUICK_CLIENT_ID)
    started = await b.start_device_flow()
    assert started.expires_in == 1
    await asyncio.sleep(1.5)
    with pytest.raises(AuthDenied, match="expired"):
        await b.poll_device_flow(started.device_code)


async def test_unknown_device_code_is_denied(env: Env) -> None:
    with pytest.raises(AuthDenied, match="invalid_grant"):
        await backend(env).poll_device_flow("not-a-device-code")


async def test_authorization_code_with_pkce(env: Env, browser: Browser) -> None:
    b = backend(env)
    verifier, state = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
    url = await b.authorization_url(REDIRECT_URI, state, verifier)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert query["code_challenge_method"] == "S256"
    assert query["code_challenge"] == pkce_challenge(verifier) != verifier
    answer = await browser.authorize(url, REDIRECT_URI)
    assert answer["state"] == state and answer["iss"] == env.provider.issuer
    principal = await b.exchange_code(answer["code"], REDIRECT_URI, verifier)
    assert principal.user == "alice" and principal.groups == ("hpc", "physics")
    with pytest.raises(AuthDenied, match="invalid_grant"):  # a code works once
        await b.exchange_code(answer["code"], REDIRECT_URI, verifier)


async def test_authorization_code_with_the_wrong_verifier_is_refused(
    env: Env, browser: Browser
) -> None:
    b = backend(env)
    verifier = secrets.token_urlsafe(48)
    answer = await browser.authorize(
        await b.authorization_url(REDIRECT_URI, "s", verifier), REDIRECT_URI
    )
    with pytest.raises(AuthDenied, match="invalid_grant"):
        await b.exchange_code(answer["code"], REDIRECT_URI, secrets.token_urlsafe(48))


async def test_bad_code_verifier_is_an_invalid_request(env: Env) -> None:
    with pytest.raises(InvalidRequest, match="code_verifier"):
        await backend(env).authorization_url(REDIRECT_URI, "s", "short")


@pytest.mark.filterwarnings("error::DeprecationWarning")  # aiohttp.BasicAuth / auth= (aiohttp 4)
async def test_confidential_client_uses_its_secret(env: Env, browser: Browser) -> None:
    secret_file = env.root / "client.secret"
    secret_file.write_text(CLIENT_SECRET + "\n")
    b = backend(env, client_id=CONFIDENTIAL_CLIENT_ID, client_secret_file=str(secret_file))
    verifier = secrets.token_urlsafe(48)
    answer = await browser.authorize(
        await b.authorization_url(REDIRECT_URI, "s", verifier), REDIRECT_URI
    )
    principal = await b.exchange_code(answer["code"], REDIRECT_URI, verifier)
    assert principal.user == "alice"
    secret_file.write_text("wrong-secret\n")
    wrong = backend(env, client_id=CONFIDENTIAL_CLIENT_ID, client_secret_file=str(secret_file))
    answer = await browser.authorize(
        await wrong.authorization_url(REDIRECT_URI, "s", verifier), REDIRECT_URI
    )
    with pytest.raises(AuthDenied, match="invalid_client"):
        await wrong.exchange_code(answer["code"], REDIRECT_URI, verifier)


async def test_claims_missing_from_the_id_token_come_from_userinfo(
    env: Env, browser: Browser
) -> None:
    b = backend(env, groups_claim="department")
    started = await b.start_device_flow()
    await browser.confirm_device(started.verification_uri_complete)
    principal = await b.poll_device_flow(started.device_code)
    assert principal is not None and principal.groups == ("theory",)


async def test_claims_are_mapped_as_configured(env: Env) -> None:
    b = backend(env, user_claim="sub", groups_claim="")
    principal = await b.principal_from_token(forge(env))
    assert principal.user == "alice-sub" and principal.groups == ()
    with pytest.raises(AuthDenied, match="'preferred_username'"):
        await backend(env).principal_from_token(forge(env, preferred_username=None))


# --- forged and broken tokens ---------------------------------------------------------------


async def test_a_correct_token_is_accepted(env: Env) -> None:
    """The positive control for the negative tests below (same forge, nothing wrong)."""
    for kid, alg in (("rsa-1", "RS256"), ("ec-1", "ES256")):
        principal = await backend(env).principal_from_token(forge(env, kid, alg))
        assert principal.user == "alice"


def _public_pem(env: Env) -> bytes:
    return (
        env.provider.keys["rsa-1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _hs256_with_public_key(env: Env) -> str:
    """The algorithm-confusion attack, built by hand (PyJWT refuses to sign it)."""

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = b64(
        json.dumps(
            {
                "iss": env.provider.issuer,
                "aud": CLIENT_ID,
                "sub": "alice-sub",
                "iat": now,
                "exp": now + 300,
                "preferred_username": "alice",
            }
        ).encode()
    )
    signature = hmac.new(_public_pem(env), header + b"." + body, hashlib.sha256).digest()
    return (header + b"." + body + b"." + b64(signature)).decode()


def _alg_none(env: Env) -> str:
    now = int(time.time())
    return jwt.encode(
        {
            "iss": env.provider.issuer,
            "aud": CLIENT_ID,
            "sub": "alice-sub",
            "iat": now,
            "exp": now + 300,
            "preferred_username": "alice",
        },
        None,
        algorithm="none",
        headers={"kid": "rsa-1"},
    )


NOW = int(time.time())
BAD_TOKENS = {
    "wrong audience": (lambda e: forge(e, aud="another-client"), "audience"),
    "expired": (lambda e: forge(e, iat=NOW - 7200, exp=NOW - 3600), "expired"),
    "not yet valid": (lambda e: forge(e, nbf=NOW + 3600), "not yet valid"),
    "wrong issuer": (lambda e: forge(e, iss="https://evil.example"), "issuer"),
    "no sub": (lambda e: forge(e, sub=None), "sub"),
    "no exp": (lambda e: forge(e, exp=None), "exp"),
    "other key, known kid": (lambda e: forge(e, key=rsa_jwk("x")[0]), "Signature"),
    "other key, unknown kid": (lambda e: forge(e, kid="evil", key=rsa_jwk("x")[0]), "unknown key"),
    "alg none": (_alg_none, "'none' is not allowed"),
    "HS256 keyed with the public key": (_hs256_with_public_key, "'HS256' is not allowed"),
    "RS256 header on the EC key": (
        lambda e: forge(e, kid="ec-1", key=e.provider.keys["rsa-1"]),
        "not a RS256 key",
    ),
    "foreign azp": (lambda e: forge(e, aud=[CLIENT_ID, "other"], azp="other"), "authorized party"),
    "garbage": (lambda e: "not.a.jwt", "not a JWT"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
async def test_bad_tokens_are_denied(env: Env, case: str) -> None:
    make, message = BAD_TOKENS[case]
    with pytest.raises(AuthDenied, match=f"(?i){message}"):
        await backend(env, jwks_refetch_interval_s=0).principal_from_token(make(env))


async def test_token_from_the_real_device_flow_after_key_rotation(
    env: Env, browser: Browser
) -> None:
    """The provider restarts with a new first key: a new kid is fetched once, unless the
    refetch interval has not passed."""
    root = env.root / "rotation"
    root.mkdir()
    provider = OidcProvider(root, env.ca_file, env.cert_file, env.key_file)
    provider.add_key("old")
    provider.start()
    try:
        eager = backend(env, issuer=provider.issuer, jwks_refetch_interval_s=0)
        lazy = backend(env, issuer=provider.issuer, jwks_refetch_interval_s=3600)
        for b in (eager, lazy):
            assert (await b.principal_from_token(forge_for(provider, "old"))).user == "alice"
        provider.stop()
        provider.add_key("new", first=True)
        provider.start()
        token = forge_for(provider, "new")
        assert (await eager.principal_from_token(token)).user == "alice"
        with pytest.raises(AuthDenied, match="unknown key 'new'"):
            await lazy.principal_from_token(token)
        started = await eager.start_device_flow()  # a real ID token, signed with "new"
        await browser.confirm_device(started.verification_uri_complete)
        assert (await eager.poll_device_flow(started.device_code)) is not None
    finally:
        provider.stop()


def forge_for(provider: OidcProvider, kid: str) -> str:
    now = int(time.time())
    return jwt.encode(
        {
            "iss": provider.issuer,
            "aud": CLIENT_ID,
            "sub": "alice-sub",
            "iat": now,
            "exp": now + 300,
            "preferred_username": "alice",
        },
        provider.keys[kid],
        algorithm="RS256",
        headers={"kid": kid},
    )


# --- transport and provider failures --------------------------------------------------------


async def test_untrusted_provider_certificate_is_refused(env: Env) -> None:
    for ca_file in (str(env.other_ca_file), None):
        with pytest.raises(BackendUnavailable, match="certificate verify failed"):
            await backend(env, ca_file=ca_file).start_device_flow()


async def test_provider_down_is_backend_unavailable(env: Env) -> None:
    b = backend(env, issuer=f"https://127.0.0.1:{free_port()}")
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await b.principal_from_token(forge(env))


async def test_discovery_for_another_issuer_is_refused(env: Env) -> None:
    b = backend(env, issuer=env.provider.issuer.replace("127.0.0.1", "localhost"))
    with pytest.raises(BackendUnavailable, match="names issuer"):
        await b.start_device_flow()


def test_a_ca_file_that_is_not_a_certificate_is_a_config_error(env: Env) -> None:
    bogus = env.root / "not-a-ca.pem"
    bogus.write_text("hello\n")
    with pytest.raises(ConfigError, match=r"auth\.backend\[3\]\.ca_file .*no usable PEM"):
        backend(env, ca_file=str(bogus))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"issuer": "http://127.0.0.1:1"}, r"auth\.backend\[3\]\.issuer must be an https://"),
        ({"issuer": None}, r"auth\.backend\[3\]\.issuer is required"),
        ({"client_id": ""}, r"auth\.backend\[3\]\.client_id may not be empty"),
        ({"scopes": ["profile"]}, r"auth\.backend\[3\]\.scopes must include 'openid'"),
        ({"scopes": "openid"}, r"auth\.backend\[3\]\.scopes must be a list"),
        ({"algorithms": ["RS256", "HS256"]}, r"auth\.backend\[3\]\.algorithms may only .*HS256"),
        ({"ca_file": "missing.pem"}, r"auth\.backend\[3\]\.ca_file .*missing\.pem"),
        ({"client_secret_file": "nope"}, r"auth\.backend\[3\]\.client_secret_file .*nope"),
        ({"leeway_s": -1}, r"auth\.backend\[3\]\.leeway_s must be >= 0"),
        ({"audience": "x"}, r"unknown key auth\.backend\[3\]\.audience"),
    ],
)
def test_config_errors_name_the_key(env: Env, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        backend(env, **overrides)
