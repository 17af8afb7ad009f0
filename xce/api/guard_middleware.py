"""The guard as aiohttp middleware, placed before authentication (see xce/auth/guard.py).

Order of checks, cheapest first: the source address against the allow-lists of the route's
class (403 `address_denied`), the per-address token bucket, the per-identity token bucket
(429 `rate_limited` with Retry-After), then, for `POST /api/v1/auth/login`, the backoff of
the (username, address) pair (429 `login_locked` with Retry-After). `POST /api/v1/auth/munge`
backs off the same way per address: who made a credential is known only once munged has
decoded it, so refused credentials from one address share one backoff (a success clears it).

Identity here is a SHA-256 of the token's signed part (`identity_key`), not the verified
subject: the guard runs before (and independently of) JWT verification, so a flood of bad
tokens is throttled as cheaply as a flood of good ones; one token is one identity, however
the header spells it. Requests without an
Authorization header are limited by address only, and so are worker routes: every worker
may share one service token, and a cluster of hundreds of workers must not throttle itself
(each worker still has its own address bucket, and `worker_allow` / mutual TLS guard them).

The address is the TCP peer's: no X-Forwarded-For is trusted, so put no proxy in front of a
guarded controller unless the proxy does its own limiting.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import math
import unicodedata
from typing import Any

from aiohttp import web

from xce.api.http import GUARD, bearer_token, json_body, json_response
from xce.api.peer import peer_credentials
from xce.api.route_class import WORKER, route_class
from xce.auth.guard import Address, GuardState, allowed, peer
from xce.core.errors import InvalidRequest
from xce.telemetry import metrics

LOCAL_HOST = ipaddress.ip_address("127.0.0.1")  # what the allow-lists see of the local socket

LOGIN_PATH = "/api/v1/auth/login"
MUNGE_PATH = "/api/v1/auth/munge"
# The backoff key of MUNGE logins (a typed user name spelling it would only share it).
MUNGE_KEY = "\x00munge"
MAX_USERNAME = 256
# Login answers that count as a failed guess: 401, and 503 (a backend was unreachable and no
# other accepted), since the password was still checked against the backends that answered;
# without it, a directory outage would lift the backoff for every users-file account.
FAILED_LOGIN = frozenset({401, 503})


def _refusal(
    status: int, code: str, message: str, retry_after: float | None = None
) -> web.Response:
    resp = json_response({"error": {"code": code, "message": message}}, status=status)
    metrics.RATE_LIMITED.labels(code).inc()
    if retry_after is not None:
        resp.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return resp


def login_key(user: str) -> str:
    """The backoff key for a typed user name. Directories match names regardless of case,
    Unicode form and surrounding or repeated spaces (LDAP caseIgnoreMatch, RFC 4518): 'ALICE'
    and ' alice' log in as alice, so they must share alice's backoff, or every spelling would
    get its own free failures. Two accounts of a case-sensitive backend that differ only in
    case share one backoff per address; that is only stricter."""
    return " ".join(unicodedata.normalize("NFKC", user).casefold().split())[:MAX_USERNAME]


async def _login_user(request: web.Request) -> str:
    """The backoff key (`login_key`) of the username in a login body, or "" when the body is
    not the expected JSON (the login handler then answers 400 itself; aiohttp keeps the body
    for it)."""
    try:
        body = await json_body(request)
    except InvalidRequest:
        return ""
    user = body.get("username") if isinstance(body, dict) else None
    return login_key(user[: 4 * MAX_USERNAME]) if isinstance(user, str) else ""


# Memoised (functools' C LRU, bounded): a client sends the same header on every request, and
# the SHA-256 was ~2 us of each; a flood of distinct tokens only churns the 4,096 entries.
@functools.lru_cache(maxsize=4096)
def identity_key(header: str) -> str:
    """The per-identity bucket of an Authorization header: the token as authentication
    parses it (`bearer_token`), and of a JWT only its signed part (header.payload). Any
    other spelling of a valid token (scheme case, spaces, a signature with other padding or
    unused trailing bits, which base64 decoding ignores) is the same bucket, so respelling
    cannot buy a fresh one; forged signatures over one payload share a bucket too."""
    token = bearer_token(header) or header.strip()
    parts = token.split(".")
    signed = ".".join(parts[:2]) if len(parts) == 3 else token
    return hashlib.sha256(signed.encode("utf-8", "surrogatepass")).hexdigest()


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "http_status", None) or getattr(exc, "status", None)
    return status if isinstance(status, int) else None


async def _guarded_login(
    request: web.Request, handler: Any, state: GuardState, address: str
) -> web.StreamResponse:
    user = MUNGE_KEY if request.path == MUNGE_PATH else await _login_user(request)
    wait = state.logins.wait(user, address, state.clock())
    if wait > 0:
        who = "refused MUNGE logins" if user == MUNGE_KEY else f"failed logins for {user!r}"
        return _refusal(
            429,
            "login_locked",
            f"too many {who} from {address}; try again in {math.ceil(wait)} s",
            wait,
        )
    try:
        response = await handler(request)
    except Exception as exc:
        if _status_of(exc) in FAILED_LOGIN:
            state.logins.failed(user, address, state.clock())
        raise
    if response.status in FAILED_LOGIN:
        state.logins.failed(user, address, state.clock())
    elif response.status < 300:
        state.logins.succeeded(user, address)
    return response


@web.middleware
async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[GUARD]
    local = peer_credentials(request)
    address: Address | None
    if local is not None:  # the local socket: this host, one bucket per uid
        address, shown = LOCAL_HOST, f"local uid {local.uid}"
    else:
        address, shown = peer(request.remote or "")
    kind = route_class(request)
    if not allowed(state.settings, kind, address):
        return _refusal(
            403, "address_denied", f"address {shown} may not use {kind} routes of this controller"
        )
    now = state.clock()
    wait = state.per_address.take(shown, now)
    if wait <= 0 and kind != WORKER:
        header = request.headers.get("Authorization")
        if header:
            wait = state.per_identity.take(identity_key(header), now)
    if wait > 0:
        return _refusal(
            429, "rate_limited", f"too many requests; retry in {math.ceil(wait)} s", wait
        )
    if request.method == "POST" and request.path in (LOGIN_PATH, MUNGE_PATH):
        return await _guarded_login(request, handler, state, shown)
    return await handler(request)
