"""The guard's connection limits: read timeouts and a cap on connections per address.

aiohttp's server waits for a request's headers and body for as long as the client likes
(its keep-alive timer, 3630 s unless set, is the only bound), so idle, partial-header and
partial-body connections pile up: 20,000 of them made `/healthz` time out. aiohttp has no
setting for header or body read timeouts, so the protocol it creates per connection is a
small subclass (`GuardedHandler`) that adds them, created by `GuardedRunner` in place of
`web.AppRunner`. With `[guard]` (`ConnectionSettings`):

* `header_timeout_s`: the whole request line and headers must arrive within this time of
  the connection opening or of the first byte of a next request (a total, so sending one
  byte at a time does not extend it); then 408 and close.
* `body_timeout_s`: while a request's body is still coming, the longest silence between
  its chunks (not while the server itself has paused reading: a slow handler is not the
  client's fault); then the connection is closed.
* `keepalive_timeout_s`: aiohttp's own keep-alive timer, for an idle connection between
  requests.
* `max_connections_per_address`: connections open at once from one source address; more
  get a 503 and are closed at once, before any parsing.

Refusals and timeouts are counted (`xce_rate_limited_requests{reason=...}`) and logged at
most once per `LOG_EVERY_S`, as one line with the counts, so a flood cannot fill the disk
with log lines.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from xce.config.guard import ConnectionSettings
from xce.telemetry import metrics

log = logging.getLogger("xce.listen.connections")
LOG_EVERY_S = 10.0


def _raw_response(status: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


class ConnectionGuard:
    """Open connections per address, and what was refused or timed out (for the log)."""

    def __init__(
        self, settings: ConnectionSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.open: dict[str, int] = {}
        # Connections accepted by a TLS listener and not closed yet, handshaking or not
        # (xce/listen/sites.py): counted before the handshake, under the same cap.
        self.accepted: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._addresses: set[str] = set()
        self._logged_at = -LOG_EVERY_S

    def admit(self, address: str, accepted: bool = False) -> bool:
        """Count a connection from `address`: one a handler was handed (`open`), or one a
        TLS listener accepted, before its handshake (`accepted`). False (noted) when that
        address already holds the cap."""
        counts = self.accepted if accepted else self.open
        cap = self.settings.max_connections_per_address
        if cap and counts.get(address, 0) >= cap:
            self.note("connection_limit", address)
            return False
        counts[address] = counts.get(address, 0) + 1
        return True

    def release(self, address: str, accepted: bool = False) -> None:
        counts = self.accepted if accepted else self.open
        left = counts.get(address, 0) - 1
        if left > 0:
            counts[address] = left
        else:
            counts.pop(address, None)

    def note(self, reason: str, address: str) -> None:
        """Count a refusal or timeout; log the counts at most once per LOG_EVERY_S."""
        metrics.RATE_LIMITED.labels(reason).inc()
        self._counts[reason] = self._counts.get(reason, 0) + 1
        if len(self._addresses) < 5:
            self._addresses.add(address)
        now = self.clock()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            counts = ", ".join(f"{n} {r}" for r, n in sorted(self._counts.items()))
            log.warning(
                "connections refused or closed by the guard since the last report: %s (from %s%s)",
                counts,
                ", ".join(sorted(self._addresses)),
                ", ..." if len(self._addresses) >= 5 else "",
            )
            self._counts.clear()
            self._addresses.clear()


_TOO_MANY = _raw_response(
    "503 Service Unavailable",
    "too_many_connections",
    "too many connections from your address; close some and retry",
)
_TOO_SLOW = _raw_response(
    "408 Request Timeout", "request_timeout", "the request's headers did not arrive in time"
)


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol with the guard's cap and read timeouts."""

    def __init__(self, manager: Any, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._address: str | None = None
        self._refused = False
        # One deadline at a time (loop time, its delay and reason), watched by at most one
        # timer that fires no later than it. Most requests arrive in one or two reads, so
        # moving or dropping the deadline must not cost a timer each time (a call_later and
        # a cancel per request were a few per cent of a submit's CPU): the timer stays, and
        # when it fires it re-arms for a deadline that moved on, or does nothing.
        self._deadline: tuple[float, float, str] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._body: Any = None  # the StreamReader of the latest request's body

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "local"
        if not self._guard.admit(address):
            self._refused = True
            cast(asyncio.WriteTransport, transport).write(_TOO_MANY)  # a stream's transport
            transport.close()
            return
        self._address = address
        super().connection_made(transport)
        self._arm(self._guard.settings.header_timeout_s, "header_timeout")

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._address is not None:
            self._guard.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        was_in_body = self._body is not None and not self._body.is_eof()
        queued = len(self._messages)
        super().data_received(data)
        new = list(itertools.islice(self._messages, queued, None))
        if new:
            self._body = new[-1][1]
        if self._body is not None and not self._body.is_eof():
            self._arm(self._guard.settings.body_timeout_s, "body_timeout")  # per chunk
        elif new or was_in_body:
            self._disarm()  # a whole request (headers and body) is in
        elif self._deadline is None:
            self._arm(self._guard.settings.header_timeout_s, "header_timeout")  # next one

    def _arm(self, delay: float, reason: str) -> None:
        if delay <= 0:
            self._deadline = None
            return
        loop = asyncio.get_running_loop()
        at = loop.time() + delay
        self._deadline = (at, delay, reason)
        if self._timer is not None and self._timer.when() > at:
            self._timer.cancel()  # it would fire too late for this deadline
            self._timer = None
        if self._timer is None:
            self._timer = loop.call_at(at, self._check)

    def _disarm(self) -> None:
        self._deadline = None  # a pending timer finds nothing to do

    def _check(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        at, delay, reason = self._deadline
        loop = asyncio.get_running_loop()
        if loop.time() < at:  # the deadline moved on since this timer was set
            self._timer = loop.call_at(at, self._check)
            return
        self._deadline = None
        self._expired(delay, reason)

    def _expired(self, delay: float, reason: str) -> None:
        if self.transport is None:
            return
        if reason == "body_timeout" and self._reading_paused:
            self._arm(delay, reason)  # the server stopped reading, not the client sending
            return
        self._guard.note(reason, self._address or "local")
        if reason == "header_timeout" and self._current_request is None:
            self.transport.write(_TOO_SLOW)  # no response of ours is under way
        self.force_close()


class GuardedServer(web.Server):
    """`web.Server` whose connections are `GuardedHandler`s."""

    guard: ConnectionGuard

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, guard=self.guard, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """`web.AppRunner` with the guard's connection limits and keep-alive timeout."""

    def __init__(self, app: web.Application, settings: ConnectionSettings, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=settings.keepalive_timeout_s, **kwargs)
        self.guard = ConnectionGuard(settings)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = GuardedServer  # the same object, with GuardedHandler connections
        cast(GuardedServer, server).guard = self.guard
        return server
