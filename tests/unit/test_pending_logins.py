"""The controller's PKCE login store: states are single use, expire, are capped (the route
that makes them is public), and only loopback http:// redirects are accepted."""

from __future__ import annotations

import time

import pytest

from xce.auth.backends.oauth2 import _VERIFIER
from xce.auth.pending_logins import PendingLogins, check_loopback_redirect
from xce.core.errors import InvalidRequest


def test_single_use_and_fresh_secrets() -> None:
    store = PendingLogins()
    state, pending = store.start("http://127.0.0.1:5000/xce/callback")
    other, again = store.start("http://127.0.0.1:5000/xce/callback")
    assert state != other and pending.code_verifier != again.code_verifier
    assert _VERIFIER.fullmatch(pending.code_verifier)  # RFC 7636 length and alphabet
    assert store.take(state) == pending
    with pytest.raises(InvalidRequest, match="already used"):
        store.take(state)


def test_expired_states_are_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    store = PendingLogins(ttl_s=10)
    state, _ = store.start("http://[::1]:1/cb")
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 11)
    with pytest.raises(InvalidRequest):
        store.take(state)
    assert len(store) == 0


def test_capped() -> None:
    store = PendingLogins(limit=3)
    states = [store.start("http://localhost:1/cb")[0] for _ in range(5)]
    assert len(store) == 3
    with pytest.raises(InvalidRequest):
        store.take(states[0])  # the oldest made room
    assert store.take(states[-1])


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:4242/xce/callback",
        "http://[::1]:80/cb",
        "http://localhost:1/cb",
        "http://LOCALHOST/cb?x=1",
    ],
)
def test_loopback_accepted(uri: str) -> None:
    assert check_loopback_redirect(uri) == uri


@pytest.mark.parametrize(
    "uri",
    [
        "https://127.0.0.1/cb",
        "http://10.0.0.1/cb",
        "http://localhost.evil.example/cb",
        "http://127.0.0.1:99999/cb",
        "http://a:b@127.0.0.1/cb",
        "http://127.0.0.1/cb#frag",
        "file:///etc/passwd",
        "//127.0.0.1/cb",
        "",
    ],
)
def test_others_refused(uri: str) -> None:
    with pytest.raises(InvalidRequest):
        check_loopback_redirect(uri)
