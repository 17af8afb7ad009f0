"""JWT issue/verify: every forged, stale or misdirected token is refused with a reason."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from xce.auth.keys import KeyStore
from xce.auth.tokens import TokenService
from xce.core.errors import Unauthorized


@pytest.fixture
def tokens(tmp_path: Path) -> TokenService:
    return TokenService.open(tmp_path / "auth", "xce", "xce-api", 3600.0, 86400.0)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": "xce",
        "aud": "xce-api",
        "sub": "mallory",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "roles": ["admin"],
        "groups": [],
        "typ": "user",
    }
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _signed(tokens: TokenService, **over: Any) -> str:
    key = tokens.keys.current
    return jwt.encode(_claims(**over), key.private, algorithm="EdDSA", headers={"kid": key.kid})


def refused(tokens: TokenService, token: str) -> str:
    with pytest.raises(Unauthorized) as info:
        tokens.verify(token)
    return info.value.message


def test_round_trip(tokens: TokenService) -> None:
    token, expires = tokens.issue("alice", ("physics",), ("user",))
    claims = tokens.verify(token)
    assert (claims.user, claims.groups, claims.roles, claims.kind) == (
        "alice",
        ("physics",),
        ("user",),
        "user",
    )
    assert claims.expires_at == expires and expires - time.time() == pytest.approx(3600, abs=5)
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "kid": tokens.keys.current_kid, "typ": "JWT"}


def test_service_tokens_are_long_lived(tokens: TokenService) -> None:
    token, expires = tokens.issue("w1", (), ("worker",), "service")
    assert tokens.verify(token).kind == "service"
    assert expires - time.time() == pytest.approx(86400, abs=5)


def test_expired(tokens: TokenService) -> None:
    token, _ = tokens.issue("alice", ttl_s=60, now=time.time() - 3600)
    assert "expired" in refused(tokens, token)


def test_not_yet_valid(tokens: TokenService) -> None:
    later = int(time.time()) + 3600
    token = _signed(tokens, nbf=later, iat=later, exp=later + 600)
    assert "not valid yet" in refused(tokens, token)


def test_wrong_audience_and_issuer(tokens: TokenService) -> None:
    assert "audience" in refused(tokens, _signed(tokens, aud="other-cluster"))
    assert "issuer" in refused(tokens, _signed(tokens, iss="someone-else"))


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat", "iss", "aud", "sub"])
def test_every_registered_claim_is_required(tokens: TokenService, claim: str) -> None:
    message = refused(tokens, _signed(tokens, **{claim: None}))
    assert claim in message


def test_wrong_key_with_the_right_kid(tokens: TokenService) -> None:
    other = Ed25519PrivateKey.generate()
    token = jwt.encode(
        _claims(), other, algorithm="EdDSA", headers={"kid": tokens.keys.current_kid}
    )
    assert "signature" in refused(tokens, token).lower()


def test_unknown_kid(tokens: TokenService) -> None:
    other = Ed25519PrivateKey.generate()
    token = jwt.encode(_claims(), other, algorithm="EdDSA", headers={"kid": "made-up"})
    assert "unknown" in refused(tokens, token)
    no_kid = jwt.encode(_claims(), tokens.keys.current.private, algorithm="EdDSA")
    assert "unknown" in refused(tokens, no_kid)


def test_alg_none(tokens: TokenService) -> None:
    header = {"alg": "none", "typ": "JWT", "kid": tokens.keys.current_kid}
    token = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(_claims()).encode())}."
    assert "'none' is not accepted" in refused(tokens, token)


def test_hs256_signed_with_the_public_key(tokens: TokenService) -> None:
    """The classic confusion: HMAC keyed with the (public) verification key."""
    header = {"alg": "HS256", "typ": "JWT", "kid": tokens.keys.current_kid}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(_claims()).encode())}"
    for secret in (tokens.keys.current.public_pem(), tokens.keys.current.public.public_bytes_raw()):
        mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        assert "'HS256' is not accepted" in refused(tokens, f"{signing_input}.{_b64(mac)}")


def test_tampered_payload(tokens: TokenService) -> None:
    token, _ = tokens.issue("alice", (), ("user",))
    head, _, sig = token.split(".")
    forged = _b64(json.dumps(_claims(sub="alice")).encode())
    assert "signature" in refused(tokens, f"{head}.{forged}.{sig}").lower()


@pytest.mark.parametrize("garbage", ["", "abc", "a.b.c", "eyJhbGciOiJFZERTQSJ9..", "ä.ö.ü"])
def test_garbage(tokens: TokenService, garbage: str) -> None:
    refused(tokens, garbage)


def test_malformed_private_claims(tokens: TokenService) -> None:
    assert "malformed" in refused(tokens, _signed(tokens, roles="admin"))
    assert "malformed" in refused(tokens, _signed(tokens, typ="root"))


def test_revocation_is_per_user_and_durable(tmp_path: Path, tokens: TokenService) -> None:
    alice, _ = tokens.issue("alice", (), ("user",), now=time.time() - 5)
    bob, _ = tokens.issue("bob", (), ("user",), now=time.time() - 5)
    tokens.revocations.revoke("alice")
    assert "revoked" in refused(tokens, alice)
    assert tokens.verify(bob).user == "bob"
    fresh, _ = tokens.issue("alice", (), ("user",))
    assert tokens.verify(fresh).user == "alice"  # a new login works again
    reopened = TokenService.open(tmp_path / "auth", "xce", "xce-api", 3600.0, 86400.0)
    assert "revoked" in refused(reopened, alice)
    assert reopened.verify(fresh).user == "alice"


def test_rotation_keeps_old_tokens_until_they_expire(tmp_path: Path, tokens: TokenService) -> None:
    old_kid = tokens.keys.current_kid
    old, _ = tokens.issue("alice", (), ("user",))
    tokens.keys.rotate()
    assert tokens.keys.current_kid != old_kid
    new, _ = tokens.issue("alice", (), ("user",))
    assert jwt.get_unverified_header(new)["kid"] == tokens.keys.current_kid
    assert tokens.verify(old).kid == old_kid and tokens.verify(new).user == "alice"
    # After a restart too: the retired key stays until max_ttl after its retirement.
    reopened = TokenService.open(tmp_path / "auth", "xce", "xce-api", 3600.0, 86400.0)
    assert reopened.verify(old).kid == old_kid
    # Once every token the old key could have signed has expired, the key is gone.
    index = json.loads((tmp_path / "auth" / "keys.json").read_text())
    index["keys"][old_kid] = time.time() - 86401
    (tmp_path / "auth" / "keys.json").write_text(json.dumps(index))
    pruned = TokenService.open(tmp_path / "auth", "xce", "xce-api", 3600.0, 86400.0)
    assert "unknown or retired" in refused(pruned, old)
    assert not (tmp_path / "auth" / f"{old_kid}.pem").exists()
    assert pruned.verify(new).user == "alice"


def test_keys_are_private_files(tmp_path: Path, tokens: TokenService) -> None:
    folder = tmp_path / "auth"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    tokens.revocations.revoke("x")
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    store = KeyStore(folder, 10.0)
    assert store.current_kid == tokens.keys.current_kid


def test_verified_tokens_are_rechecked_for_revocation_and_expiry(tokens: TokenService) -> None:
    """The cache of verified tokens never outlives revocation, expiry or key retirement."""
    alice, _ = tokens.issue("alice", (), ("user",), now=time.time() - 5)
    assert tokens.verify(alice) is tokens.verify(alice)  # the second is a cache hit
    tokens.revocations.revoke("alice")
    assert "revoked" in refused(tokens, alice)
    # Valid for one or two more seconds (exp is 30 s of leeway in the past):
    started = time.time()
    short, _ = tokens.issue("bob", (), ("user",), ttl_s=72, now=started - 100)
    assert tokens.verify(short).user == "bob"
    time.sleep(max(0.0, int(started - 100 + 72) + 30 - time.time()) + 0.1)
    assert "expired" in refused(tokens, short)
