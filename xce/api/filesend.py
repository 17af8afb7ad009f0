"""A store file as an HTTP answer: whole or one byte range, with its size and SHA-256.

Every download route answers `Range: bytes=N-`, `bytes=N-M` and `bytes=-N` with 206 and
`Content-Range`, so an interrupted download of a large output resumes where it stopped; it
always sends `Content-Length`, `Accept-Ranges: bytes`, `X-XCE-SHA256` (the hex SHA-256 of
the whole file, whatever part is sent) and an `ETag` of that digest, which `If-Range` may
name: a file replaced since the client's first part then comes whole (200), not as a range
of different content. A range the file cannot satisfy, or a malformed or multiple one, is
416 with `Content-Range: bytes */SIZE` and a JSON body. `If-None-Match` naming that ETag is
answered 304 with no body (`not_modified`), before the route takes a transfer slot: a
worker that holds an array's input already asks only whether it is still the same file.
Bytes sent are counted per route kind (`xce_file_sent_bytes_total`).

aiohttp's FileResponse is not used: it would serve `NAME.gz` in place of `NAME` to a client
that accepts gzip (job outputs are named by users, so both may exist), and it answers 416
with an empty body. Over plain TCP the file goes by `sendfile` (`loop.sendfile`): the kernel
copies page cache to socket, with no read into the controller and no thread per piece (a 1
GiB answer cost the controller about 0.6 s of CPU the other way). Where the connection
cannot take it (TLS), the file is read in the store's threads (xce/store/fileio.py) a piece
at a time and written as the client takes it. Neither holds a whole file.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from aiohttp import web

from xce.api.http import REQUEST_ID
from xce.core.errors import RangeNotSatisfiable
from xce.protocol.files import DIGEST_HEADER
from xce.store.files import Opened
from xce.telemetry import metrics

PIECE = 1 << 20
# One range, each bound at most 19 digits (below 2**63): longer numbers are no file's.
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d{0,19})\s*-\s*(\d{0,19})\s*$", re.IGNORECASE)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The [start, end) a `Range` header asks of a file of `size` bytes; None: the whole
    file (no header, or a unit other than bytes, which RFC 9110 says to ignore)."""
    if header is None:
        return None
    unit = header.split("=", 1)[0].strip().lower()
    if unit != "bytes":
        return None
    found = _RANGE.match(header)
    if found is None:
        raise RangeNotSatisfiable(
            f"Range {header[:100]!r} is not one range of bytes=FIRST-LAST, bytes=FIRST- "
            f"or bytes=-COUNT; the file has {size} bytes",
            size,
        )
    first, last = found.group(1), found.group(2)
    if not first:
        if not last or int(last) == 0 or size == 0:
            raise RangeNotSatisfiable(
                f"Range {header[:100]!r} asks for no bytes of a file of {size} bytes", size
            )
        return max(0, size - int(last)), size
    start = int(first)
    if last and int(last) < start:
        raise RangeNotSatisfiable(
            f"Range {header[:100]!r} ends before it starts; the file has {size} bytes", size
        )
    if start >= size:
        raise RangeNotSatisfiable(
            f"Range {header[:100]!r} starts at byte {start}, at or past the end of the file "
            f"({size} bytes)",
            size,
        )
    end = min(size, int(last) + 1) if last else size
    return start, end


def _if_range_holds(request: web.Request, etag: str) -> bool:
    """RFC 9110 If-Range: the range applies only to the representation the client names;
    a date (or any other validator) is not trusted: the file is sent whole."""
    condition = request.headers.get("If-Range")
    return condition is None or condition.strip() == etag


def not_modified(request: web.Request, opened: Opened, kind: str) -> web.Response | None:
    """304 (and the file closed) when `If-None-Match` names the file's ETag, else None.
    A weak validator (`W/"..."`) or `*` is not a SHA-256 the client holds: the file is sent."""
    condition = request.headers.get("If-None-Match")
    if condition is None:
        return None
    etag = f'"{opened.sha256}"'
    if etag not in (part.strip() for part in condition.split(",")):
        return None
    opened.handle.close()
    metrics.labelled(metrics.FILE_NOT_MODIFIED, kind).inc()
    return web.Response(
        status=304,
        headers={"ETag": etag, DIGEST_HEADER: opened.sha256, "Cache-Control": "no-store"},
    )


async def send_file(
    request: web.Request, opened: Opened, kind: str = "output"
) -> web.StreamResponse:
    """Answer with the opened file (whole, or the range asked for), then close it. Runs
    inside the caller's transfer slot; a client that goes away ends the answer quietly.
    `kind` labels the bytes sent in `xce_file_sent_bytes_total`."""
    sent = metrics.labelled(metrics.FILE_BYTES_SENT, kind)
    try:
        size, sha256 = opened.size, opened.sha256
        etag = f'"{sha256}"'
        wanted = byte_range(request.headers.get("Range"), size)
        if wanted is not None and not _if_range_holds(request, etag):
            wanted = None
        start, end = wanted if wanted is not None else (0, size)
        response = web.StreamResponse(status=206 if wanted is not None else 200)
        response.content_type = "application/octet-stream"
        response.content_length = end - start
        response.headers["Accept-Ranges"] = "bytes"
        response.headers[DIGEST_HEADER] = sha256
        response.headers["ETag"] = etag
        response.headers["Cache-Control"] = "no-store"  # job data: no proxy keeps a copy
        if wanted is not None:
            response.headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        request_id = request.get(REQUEST_ID)
        if request_id:
            response.headers["X-Request-Id"] = request_id
        await response.prepare(request)
        try:
            if not await _sent_by_kernel(request, opened, start, end, sent):
                offset = start
                while offset < end:
                    piece = await opened.handle.call(os.pread, min(PIECE, end - offset), offset)
                    if not piece:  # cannot happen to a file replaced only whole; never loop
                        break
                    await response.write(piece)
                    offset += len(piece)
                    sent.inc(len(piece))
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away mid-file: it may resume with a Range
        return response
    finally:
        opened.handle.close()


async def _sent_by_kernel(
    request: web.Request, opened: Opened, start: int, end: int, sent: Any
) -> bool:
    """Send bytes [start, end) of the file with `sendfile`, after the headers `prepare`
    wrote; False (nothing sent) where the connection cannot (TLS, or no socket left).
    A client that goes away raises ConnectionError, as a write would."""
    transport = request.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("the client went away")
    if start == end:
        return True  # an empty file: nothing to send (sendfile refuses a count of 0)
    if transport.get_extra_info("sslcontext") is not None:
        return False
    # A file object over the same open file (its own descriptor, so closing it leaves the
    # handle's): sendfile reads at the offsets given, never through a path.
    with os.fdopen(os.dup(opened.handle.fd), "rb", buffering=0) as file:
        try:
            await asyncio.get_running_loop().sendfile(
                transport, file, start, end - start, fallback=False
            )
        except asyncio.SendfileNotAvailableError:
            return False
        finally:
            # what the kernel took, as far as the file object's offset says (sendfile
            # leaves it after the last byte sent)
            sent.inc(max(0, file.tell() - start))
    return True
