"""File bodies in and out of the API: a bounded number at once, sizes and digests from headers.

Sites without shared storage move every job input and output through the controller, so
file transfers can be many and long. They get at most `[controller]
max_concurrent_transfers` slots (`TransferGate`); a transfer that finds none waits up to
`transfer_wait_s` and is then answered 503 `busy` with Retry-After. Nothing else waits for
a slot: job listings, heartbeats and finish reports are not file bodies and never queue
behind one.

A body's size comes from `Content-Length` and is checked before it is read (the store
refuses a file that cannot be kept, 413, xce/store/room.py). Its digest is declared in one
of two forms, and a body that differs is refused (400 `digest_mismatch`) with nothing kept:

* `X-XCE-SHA256: <64 hex digits>`: the file's SHA-256 before the body. The sender must read
  the file twice (once to hash, once to send); older clients send this form.
* `X-XCE-SHA256: trailing`: the body is the file followed by the 64 hex digits of its
  SHA-256, and `Content-Length` counts both. The sender hashes while it sends, one read of
  the file; the store holds the last 64 bytes back and compares before the file is kept.
  A controller from before this form refuses the value (400 naming the header) before it
  reads the body, which tells a newer client to send the first form.

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
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.http import HttpVersion11

from xce.core.errors import Busy, InvalidRequest
from xce.protocol.files import DIGEST_BYTES, DIGEST_HEADER, TRAILING
from xce.telemetry import metrics

# How much of a body the connection may buffer ahead of the store while a transfer holds its
# slot (aiohttp's default, 64 KiB, pauses and resumes the socket every 128 KiB: about 8,000
# times per GiB, the largest cost of a body on the event loop). Bounded by the slots.
BODY_BUFFER = 1 << 20
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


@dataclass
class Declared:
    """What a file body's headers say about the file: its size in bytes (None: chunked,
    counted as it arrives) and its SHA-256, known before the body (`sha256`) or carried
    as the body's last 64 bytes (`trailing`; `sha256` is set once they are read)."""

    name: str
    size: int | None
    trailing: bool = False
    sha256: str | None = field(default=None)

    def expected(self) -> str | None:
        """The digest the file must have: asked once the whole body is in."""
        return self.sha256


def declared(request: web.Request, name: str) -> Declared:
    """The file a body carries, from its `Content-Length` and `X-XCE-SHA256` (400 naming
    the header when it is neither 64 hex digits nor `trailing`, or when a trailing body is
    too short to hold its digest). aiohttp has already refused a malformed length."""
    length = request.content_length
    size = length if length is not None and length >= 0 else None
    value = request.headers.get(DIGEST_HEADER)
    if value is None:
        return Declared(name, size)
    value = value.strip()
    if value.lower() == TRAILING:
        if size is not None and size < DIGEST_BYTES:
            raise InvalidRequest(
                f"{name}: a body with {DIGEST_HEADER}: {TRAILING} ends with the "
                f"{DIGEST_BYTES} hex digits of the file's SHA-256, and this one has "
                f"{size} bytes"
            )
        return Declared(name, None if size is None else size - DIGEST_BYTES, trailing=True)
    if not _HEX.match(value):
        raise InvalidRequest(
            f"{name}: {DIGEST_HEADER} must be the 64 hex digits of the body's SHA-256, "
            f"or {TRAILING!r}"
        )
    return Declared(name, size, sha256=value.lower())


async def defer_continue(request: web.Request) -> None:
    """The routes' `Expect` handler: aiohttp's default answers `100 Continue` before any
    check has run; this one only refuses expectations other than 100-continue, and
    `body_chunks` sends the 100 once the body is really wanted."""
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11 and expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")


def body_chunks(
    request: web.Request, kind: str = "upload", file: Declared | None = None
) -> AsyncIterator[bytes | memoryview]:
    """The file's bytes as they arrive; a client waiting on `Expect: 100-continue` is told
    to send the body only now, when the first chunk is asked for (after every check). Bytes
    are counted per route kind (`xce_file_received_bytes_total`: upload, output). With a
    `trailing` digest (`file`), the body's last 64 bytes are held back and, once the body
    has ended, parsed into `file.sha256`."""
    chunks = _arriving(request)
    files = chunks if file is None or not file.trailing else _hold_back(chunks, file)
    return _counted(files, kind)


async def _counted(
    chunks: AsyncIterator[bytes | memoryview], kind: str
) -> AsyncIterator[bytes | memoryview]:
    """`chunks`, their bytes counted: the file's, not a trailing digest's."""
    received = metrics.labelled(metrics.FILE_BYTES_RECEIVED, kind)
    async for chunk in chunks:
        received.inc(len(chunk))
        yield chunk


async def _hold_back(
    chunks: AsyncIterator[bytes], file: Declared
) -> AsyncIterator[bytes | memoryview]:
    """`chunks` less their last `DIGEST_BYTES`, which become `file.sha256`. A chunk is
    passed on as a view without its tail (no copy), the tail of the one before first."""
    tail = b""
    async for chunk in chunks:
        if len(chunk) >= DIGEST_BYTES:
            if tail:
                yield tail
            yield memoryview(chunk)[:-DIGEST_BYTES]
            tail = chunk[-DIGEST_BYTES:]
        else:
            joined = tail + chunk
            if len(joined) > DIGEST_BYTES:
                yield joined[:-DIGEST_BYTES]
            tail = joined[-DIGEST_BYTES:]
    text = tail.decode("ascii", errors="replace")
    if len(tail) < DIGEST_BYTES or not _HEX.match(text):
        raise InvalidRequest(
            f"{file.name}: the body ends without the {DIGEST_BYTES} hex digits of the file's "
            f"SHA-256 ({DIGEST_HEADER}: {TRAILING}); nothing was kept"
        )
    file.sha256 = text.lower()


async def _arriving(request: web.Request) -> AsyncIterator[bytes]:
    """The request's body in the pieces the socket delivered (not copied again), buffered
    up to `BODY_BUFFER` ahead of the store."""
    if (
        not request.get(_CONTINUED)
        and request.version == HttpVersion11
        and request.headers.get("Expect", "").lower() == "100-continue"
    ):
        request[_CONTINUED] = True
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    request.content.set_read_chunk_size(BODY_BUFFER)
    # One buffered piece at a time: `iter_any` joins all that is buffered into one new
    # `bytes`, a copy of every byte on the event loop.
    async for chunk, _ in request.content.iter_chunks():
        if chunk:
            yield chunk
        elif request.content.at_eof():
            # An empty body is aiohttp's one shared EmptyStreamReader, which ends the
            # iteration only for the first body that reads it and answers (b"", True) to
            # every later one: without this an empty file would spin the loop forever.
            return
