"""Authorization code + PKCE logins in flight: the controller is the OIDC client, so it makes
each login's `state` and S256 `code_verifier` and keeps them until the browser comes back.

They live in memory only (a restart just means signing in again), expire after a few
minutes, are taken at most once (a replayed redirect finds nothing), and are capped in number:
the route that makes them is public, so nobody may grow the controller's memory with it.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass

from xce.core.errors import InvalidRequest

TTL_S = 600.0
MAX_PENDING = 1024
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class PendingLogin:
    redirect_uri: str
    code_verifier: str
    expires: float


def check_loopback_redirect(redirect_uri: str) -> str:
    """Only a loopback http:// URL (RFC 8252 7.3): the code must land on the user's own
    machine, never on a host an attacker names, or a phished link would hand them the code."""
    try:
        parts = urllib.parse.urlsplit(redirect_uri)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise InvalidRequest(f"redirect_uri {redirect_uri!r} is not a URL") from None
    host = (parts.hostname or "").lower()
    loopback = host in LOOPBACK_NAMES
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host) in (
                ipaddress.ip_address("127.0.0.1"),
                ipaddress.ip_address("::1"),
            )
        except ValueError:
            loopback = False
    if parts.scheme != "http" or not loopback or parts.username or parts.password or parts.fragment:
        raise InvalidRequest(
            "redirect_uri must be a loopback http:// URL (127.0.0.1, [::1] "
            f"or localhost) without user info or fragment, not {redirect_uri!r}"
        )
    return redirect_uri


class PendingLogins:
    """state -> (redirect_uri, code_verifier), single use, TTL_S, at most MAX_PENDING."""

    def __init__(self, ttl_s: float = TTL_S, limit: int = MAX_PENDING) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self._pending: OrderedDict[str, PendingLogin] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def start(self, redirect_uri: str) -> tuple[str, PendingLogin]:
        """A fresh state and verifier (43 characters of base64url: RFC 7636's minimum
        length, 256 bits); the oldest pending login makes room when the cap is reached."""
        self._expire()
        while len(self._pending) >= self.limit:
            self._pending.popitem(last=False)
        state = secrets.token_urlsafe(32)
        pending = PendingLogin(
            redirect_uri, secrets.token_urlsafe(32), time.monotonic() + self.ttl_s
        )
        self._pending[state] = pending
        return state, pending

    def take(self, state: str) -> PendingLogin:
        """The login `state` started; InvalidRequest when unknown, expired or already used."""
        self._expire()
        pending = self._pending.pop(state, None)
        if pending is None:
            raise InvalidRequest(
                "unknown, expired or already used login state; start the sign-in again"
            )
        return pending

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            state, oldest = next(iter(self._pending.items()))
            if oldest.expires > now:
                return
            del self._pending[state]
