"""File bodies in and out of the API: a bounded number at once, sizes and digests from headers.

Sites without shared storage move every job input and output through the controller, so
file transfers can be many and long. They get at most `[controller]
max_concurrent_transfers` slots (`TransferGate`); a transfer that finds none waits up to
`transfer_wait_s` and is then answered 503 `busy` with Retry-After. Nothing else waits for
a slot: job listings, heartbeats and finish reports are not file bodies and never queue
behind one.

A body's size and digest come from its headers and are checked before it is read:
`Content-Length` (the store refuses a file that cannot be kept, 413, xce/store/room.py) and
`X-XCE-SHA256` (the hex SHA-256 of the whole file: a body that differs is refused, 400).
A client that sends `Expect: 100-continue` is told to send its body only after those checks
and the wait for a slot (`defer_continue`), so a refused file never crosses the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections import deque
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.http import HttpVersion11

from xce.core.errors import Busy, InvalidRequest
from xce.telemetry import metrics

DIGEST_HEADER = "X-XCE-SHA256"
CHUNK = 1 << 16
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_CONTINUED = web.RequestKey("continued", bool)


class TransferGate:
    """At most `limit` file bodies in flight; others wait in order, at most `wait_s`."""

    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit = max(1, limit)
        self.wait_s = wait_s
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def _acquire(self, what: str) -> None:
        if self.in_use < self.limit and not self.waiting:
            self.in_use += 1
            return
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()
        self._waiters.append(granted)

        def expire() -> None:
            if not granted.done():
                granted.set_exception(TimeoutError())

        timer = loop.call_later(self.wait_s, expire)
        try:
            await granted
        except TimeoutError:
            raise Busy(
                f"{what}: {self.limit} file transfers are under way, the most this controller "
                "runs at once ([controller] max_concurrent_transfers); retry in a moment",
                math.ceil(self.wait_s),
            ) from None
        except BaseException:
            # Cancelled (the client went away): a slot handed over meanwhile is passed on.
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                self._release()
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(granted)

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to the next in line, still in use
                return
        self.in_use -= 1

    @contextlib.asynccontextmanager
    async def slot(self, what: str) -> AsyncIterator[None]:
        """Hold one transfer slot for the body of `what` (named in a 503)."""
        await self._acquire(what)
        try:
            yield
        finally:
            self._release()


TRANSFERS = web.AppKey("transfers", TransferGate)


def gate(request: web.Request) -> TransferGate:
    return request.app[TRANSFERS]


def declared_length(request: web.Request) -> int | None:
    """The body's Content-Length (None: chunked, counted as it arrives). aiohttp has
    already refused a malformed one; a negative or absurd one never reaches here."""
    length = request.content_length
    return length if length is not None and length >= 0 else None


def declared_digest(request: web.Request, name: str) -> str | None:
    """The `X-XCE-SHA256` header: the hex SHA-256 of the whole body (lower case), or None."""
    value = request.headers.get(DIGEST_HEADER)
    if value is None:
        return None
    value = value.strip()
    if not _HEX.match(value):
        raise InvalidRequest(
            f"{name}: {DIGEST_HEADER} must be the 64 hex digits of the body's SHA-256"
        )
    return value.lower()


async def defer_continue(request: web.Request) -> None:
    """The routes' `Expect` handler: aiohttp's default answers `100 Continue` before any
    check has run; this one only refuses expectations other than 100-continue, and
    `body_chunks` sends the 100 once the body is really wanted."""
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11 and expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")


async def body_chunks(request: web.Request, kind: str = "upload") -> AsyncIterator[bytes]:
    """The request's body as it arrives; a client waiting on `Expect: 100-continue` is told
    to send it only now, when the first chunk is asked for (after every check). Bytes are
    counted per route kind (`xce_file_received_bytes_total`: upload, output)."""
    received = metrics.labelled(metrics.FILE_BYTES_RECEIVED, kind)
    if (
        not request.get(_CONTINUED)
        and request.version == HttpVersion11
        and request.headers.get("Expect", "").lower() == "100-continue"
    ):
        request[_CONTINUED] = True
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        received.inc(len(chunk))
        yield chunk
