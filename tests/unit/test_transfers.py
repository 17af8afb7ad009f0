"""File transfers of both clients against real HTTP servers on 127.0.0.1: streamed, bounded
by idleness (never by a clock on the body), resumed with Range, verified with
X-XCE-SHA256, retried a bounded number of times; and the CLI's sinks write every byte."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from xce.auth.pki import create_ca, issue_certificate
from xce.cli.transfers import Bars, FdSink, FileSink
from xce.client.errors import ApiError
from xce.client.http import XceClient
from xce.client.light import LightClient
from xce.client.transfer import TransferPolicy

DATA = os.urandom(3 << 20) + b"end"  # a few chunks of the clients' 1 MiB
DIGEST = hashlib.sha256(DATA).hexdigest()


def fast(**changes: Any) -> TransferPolicy:
    """A policy for tests: short idle timeout, no waiting between tries."""
    base: dict[str, Any] = {"idle_timeout_s": 2.0, "first_wait_s": 0.01, "max_wait_s": 0.01}
    return TransferPolicy(**{**base, **changes})


@dataclass
class Behaviour:
    """What the test server does to GET /file (each fault once) and what it saw."""

    digest: str | None = DIGEST
    cut_at: int | None = None  # close the connection after this many body bytes
    stall_at: int | None = None  # stop sending (for good) after this many body bytes
    ignore_range: bool = False  # answer a Range request with the whole file (old controllers)
    slow_s: float = 0.0  # spread the body over this long
    read_pause_s: float = 0.0  # an upload's body is read 64 KiB at a time, this far apart
    ranges: list[str | None] = field(default_factory=list)
    uploads: list[dict[str, Any]] = field(default_factory=list)
    upload_answers: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)  # ends a stall


BEHAVIOUR = web.AppKey("behaviour", Behaviour)


class MemorySink:
    def __init__(self, can_restart: bool = True) -> None:
        self.data = bytearray()
        self.can_restart = can_restart
        self.restarts = 0

    async def write(self, data: bytes) -> None:
        self.data += data

    async def restart(self) -> bool:
        if not self.can_restart:
            return False
        self.restarts += 1
        self.data.clear()
        return True


async def _serve_file(request: web.Request) -> web.StreamResponse:
    b = request.app[BEHAVIOUR]
    header = request.headers.get("Range")
    b.ranges.append(header)
    start = 0
    if header and not b.ignore_range:
        start = int(header.removeprefix("bytes=").rstrip("-"))
    resp = web.StreamResponse(status=206 if start else 200)
    resp.content_length = len(DATA) - start
    resp.content_type = "application/octet-stream"
    if start:
        resp.headers["Content-Range"] = f"bytes {start}-{len(DATA) - 1}/{len(DATA)}"
    if b.digest:
        resp.headers["X-XCE-SHA256"] = b.digest
    await resp.prepare(request)
    offset = start
    pieces = 30
    step = max(1, len(DATA) // pieces)
    while offset < len(DATA):
        end = min(len(DATA), offset + step)
        if b.cut_at is not None and offset <= b.cut_at < end:
            await resp.write(DATA[offset : b.cut_at])
            b.cut_at = None
            assert request.transport is not None
            request.transport.abort()
            return resp
        if b.stall_at is not None and offset <= b.stall_at < end:
            await resp.write(DATA[offset : b.stall_at])
            await b.released.wait()
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write(DATA[offset:end])
        offset = end
        if b.slow_s:
            await asyncio.sleep(b.slow_s / pieces)
    await resp.write_eof()
    return resp


async def _take_upload(request: web.Request) -> web.Response:
    b = request.app[BEHAVIOUR]
    body = bytearray()
    pieces = 0
    async for chunk in request.content.iter_chunked(64 << 10 if b.read_pause_s else 1 << 20):
        body += chunk
        pieces += 1
        await asyncio.sleep(b.read_pause_s)
    file, trailer = _split(request.headers.get("X-XCE-SHA256"), bytes(body))
    digest = hashlib.sha256(file)
    b.uploads.append(
        {
            "headers": dict(request.headers),
            "size": len(file),
            "sha256": digest.hexdigest(),
            "trailer": trailer,
            "pieces": pieces,
        }
    )
    if b.upload_answers:
        status, body, headers = b.upload_answers.pop(0)
        return web.json_response(body, status=status, headers=headers)
    return web.json_response({"upload_id": "u1", "sha256": digest.hexdigest()}, status=201)


def _split(header: str | None, body: bytes) -> tuple[bytes, str | None]:
    """(the file, the digest that trailed it) of a body, as the controller reads it."""
    if header == "trailing":
        return body[:-64], body[-64:].decode()
    return body, None


# The servers' receive buffers: small, as on a link whose pace is the receiver's (loopback
# would otherwise take megabytes into the receiving kernel at once).
RECEIVE_BUFFER = 64 << 10


def _link_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)  # the accepted inherit
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Behaviour]]:
    app = web.Application()
    app[BEHAVIOUR] = b = Behaviour()
    app.router.add_get("/file", _serve_file)
    app.router.add_post("/api/v1/uploads", _take_upload)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.SockSite(runner, _link_socket())
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", b
    finally:
        b.released.set()
        await runner.cleanup()


# --- downloads (XceClient) ---------------------------------------------------------------


async def test_a_body_longer_than_the_request_timeout_completes(
    server: tuple[str, Behaviour],
) -> None:
    """The old client had a 30 s clock over the whole answer, body included: here the
    request timeout is 0.5 s and the body takes about 2 s, bytes moving all the while."""
    url, b = server
    b.slow_s = 2.0
    sink = MemorySink()
    async with XceClient([url], timeout=0.5, transfer=fast(idle_timeout_s=1.0)) as client:
        got = await client.download_to("/file", sink, what="big.bin")
    assert bytes(sink.data) == DATA
    assert got.verified and got.sha256 == DIGEST and got.size == len(DATA)


async def test_a_broken_download_resumes_from_the_byte_it_holds(
    server: tuple[str, Behaviour],
) -> None:
    url, b = server
    b.cut_at = 1_500_000
    sink = MemorySink()
    async with XceClient([url], transfer=fast()) as client:
        got = await client.download_to("/file", sink, what="big.bin")
    assert hashlib.sha256(sink.data).hexdigest() == DIGEST == got.sha256
    first, second = b.ranges
    assert first is None and second is not None and second.startswith("bytes=")
    assert 0 < int(second.removeprefix("bytes=").rstrip("-")) <= 1_500_000  # what it held
    assert sink.restarts == 0


async def test_a_stalled_download_fails_naming_file_bytes_and_peer(
    server: tuple[str, Behaviour],
) -> None:
    url, b = server
    b.stall_at = 1_000_000
    sink = MemorySink()
    policy = fast(idle_timeout_s=0.5, attempts=2)
    async with XceClient([url], transfer=policy) as client:
        with pytest.raises(ApiError) as caught:
            await client.download_to("/file", sink, what="big.bin")
    message = caught.value.message
    assert "big.bin" in message and "no data for 0.5 s" in message, message
    assert url in message and f"of {len(DATA)} bytes" in message, message
    assert "gave up after 2 tries" in message and "\n" not in message, message
    assert len(b.ranges) == 2  # bounded: the second try resumed, stalled again, gave up


async def test_a_damaged_download_is_an_error(server: tuple[str, Behaviour]) -> None:
    url, b = server
    b.digest = hashlib.sha256(b"something else").hexdigest()
    async with XceClient([url], transfer=fast()) as client:
        with pytest.raises(ApiError) as caught:
            await client.download_to("/file", MemorySink(), what="big.bin")
    assert caught.value.code == "digest_mismatch" and "big.bin" in caught.value.message


async def test_without_a_digest_the_download_is_unverified_not_refused(
    server: tuple[str, Behaviour],
) -> None:
    url, b = server
    b.digest = None
    sink = MemorySink()
    async with XceClient([url], transfer=fast()) as client:
        got = await client.download_to("/file", sink, what="big.bin")
    assert bytes(sink.data) == DATA and not got.verified


@pytest.mark.parametrize("can_restart", [True, False])
async def test_a_whole_file_answer_to_a_range_restarts_or_skips(
    server: tuple[str, Behaviour], can_restart: bool
) -> None:
    """An older controller ignores Range: a file sink starts again from byte 0, a pipe
    (which cannot) skips the bytes it already delivered. Either way every byte once."""
    url, b = server
    b.cut_at, b.ignore_range = 1_200_000, True
    sink = MemorySink(can_restart)
    async with XceClient([url], transfer=fast()) as client:
        got = await client.download_to("/file", sink, what="big.bin")
    assert bytes(sink.data) == DATA and got.verified
    assert sink.restarts == (1 if can_restart else 0)


# --- uploads (XceClient.send_file, LightClient.upload) -------------------------------------


async def test_send_file_streams_with_its_digest_and_length(
    server: tuple[str, Behaviour], tmp_path: Path
) -> None:
    url, b = server
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    async with XceClient([url], transfer=fast()) as client:
        upload_id = await client.upload(path)
    assert upload_id == "u1"
    (seen,) = b.uploads
    assert seen["sha256"] == DIGEST and seen["size"] == len(DATA)
    # One pass over the file: its digest follows it, counted in the body's length.
    assert seen["headers"]["X-XCE-SHA256"] == "trailing" and seen["trailer"] == DIGEST
    assert seen["headers"]["Content-Length"] == str(len(DATA) + 64)


async def test_send_file_final_busy_and_digest_answers(
    server: tuple[str, Behaviour], tmp_path: Path
) -> None:
    url, b = server
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    busy = {"error": {"code": "busy", "message": "all slots taken"}}
    damaged = {"error": {"code": "digest_mismatch", "message": "the body differs"}}
    too_large = {"error": {"code": "too_large", "message": "over max_upload_mb"}}
    b.upload_answers = [(503, busy, {"Retry-After": "0"}), (400, damaged, {})]
    async with XceClient([url], transfer=fast()) as client:
        assert await client.upload(path) == "u1"
        assert len(b.uploads) == 3  # busy, then a refused digest, then taken
        b.upload_answers = [(413, too_large, {})]
        with pytest.raises(ApiError) as caught:
            await client.upload(path)
    assert caught.value.status == 413 and len(b.uploads) == 4  # never retried


async def test_an_upload_over_a_slow_link_is_not_a_stall_once_handed_over(
    server: tuple[str, Behaviour], tmp_path: Path
) -> None:
    """The peer takes the body at about 1.3 MB/s: the sending kernel takes most of the file
    at once, and emptying its buffer takes several idle timeouts after the last byte was
    handed over. What the peer acknowledges meanwhile is progress; the upload succeeds."""
    url, b = server
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    b.read_pause_s = 0.05
    async with XceClient([url], transfer=fast(idle_timeout_s=0.5, attempts=1)) as client:
        assert await client.upload(path) == "u1"
    (seen,) = b.uploads
    assert seen["sha256"] == DIGEST


class _UploadServer:
    """http.server for LightClient: records uploads, answers from a script."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.read_pause_s = 0.0  # the body is read 64 KiB at a time, this far apart
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body, left = bytearray(), length
                piece = 64 << 10 if outer.read_pause_s else 1 << 20
                while left:
                    chunk = self.rfile.read(min(left, piece))
                    if not chunk:
                        break
                    body += chunk
                    left -= len(chunk)
                    time.sleep(outer.read_pause_s)
                file, trailer = _split(self.headers.get("X-XCE-SHA256"), bytes(body))
                outer.seen.append(
                    {
                        "headers": dict(self.headers),
                        "sha256": hashlib.sha256(file).hexdigest(),
                        "trailer": trailer,
                    }
                )
                status, body, headers = (
                    outer.answers.pop(0) if outer.answers else (201, {"upload_id": "u7"}, {})
                )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def server_bind(self) -> None:
                self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
                super().server_bind()

        self.httpd = Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def upload_server() -> Iterator[_UploadServer]:
    s = _UploadServer()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()


def test_light_upload_hashes_as_it_streams_and_retries_bounded(
    upload_server: _UploadServer, tmp_path: Path
) -> None:
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    busy = {"error": {"code": "busy", "message": "all slots taken"}}
    upload_server.answers = [(503, busy, {"Retry-After": "0"})]
    moved: list[int] = []
    hashed: list[int] = []
    with LightClient([upload_server.url], transfer=fast()) as client:
        upload_id = client.upload(path, lambda n, _: moved.append(n), lambda n, _: hashed.append(n))
        assert upload_id == "u7"
        assert [s["sha256"] for s in upload_server.seen] == [DIGEST, DIGEST]
        assert [s["trailer"] for s in upload_server.seen] == [DIGEST, DIGEST]
        assert upload_server.seen[1]["headers"]["X-XCE-SHA256"] == "trailing"
        assert not hashed and moved[-1] == len(DATA)  # hashed as sent: no first pass
        quota = {"error": {"code": "quota_exceeded", "message": "over your upload quota"}}
        upload_server.answers = [(413, quota, {})]
        with pytest.raises(ApiError, match="upload quota"):
            client.upload(path)
        assert len(upload_server.seen) == 3  # a final answer is not retried
        upload_server.answers = [(500, {"error": {"code": "x", "message": "boom"}}, {})] * 5
        with pytest.raises(ApiError) as caught:
            LightClient([upload_server.url], transfer=fast(attempts=3)).upload(path)
        assert "gave up after 3 tries" in caught.value.message and "in.bin" in caught.value.message


def test_a_light_upload_over_a_slow_link_is_not_a_stall_once_handed_over(
    upload_server: _UploadServer, tmp_path: Path
) -> None:
    """As above, for the light client (`xce job submit --stage-in`)."""
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    upload_server.read_pause_s = 0.05
    with LightClient([upload_server.url], transfer=fast(idle_timeout_s=0.5, attempts=1)) as client:
        assert client.upload(path) == "u7"
    assert [s["sha256"] for s in upload_server.seen] == [DIGEST]


def test_a_light_upload_to_a_peer_that_stops_reading_fails_on_the_idle_clock(
    upload_server: _UploadServer, tmp_path: Path
) -> None:
    """A peer that takes 64 KiB and then nothing: once the socket's buffers are full the
    send waits for room, and fails after the idle timeout with one line naming the file
    and the bytes moved (fewer than the file: caught in the send, not after it)."""
    size = 24 << 20  # more than loopback's largest send buffer and the peer's receive buffer
    path = tmp_path / "in.bin"
    path.write_bytes(os.urandom(size))
    upload_server.read_pause_s = 30.0
    client = LightClient([upload_server.url], transfer=fast(idle_timeout_s=0.5, attempts=1))
    with client, pytest.raises(ApiError) as caught:
        client.upload(path)
    moved = re.search(r"no data for 0.5 s after (\d+) of (\d+) bytes", caught.value.message)
    assert moved is not None, caught.value.message
    assert "in.bin" in caught.value.message
    assert 0 < int(moved.group(1)) < size == int(moved.group(2))


def test_a_light_upload_over_tls_streams_with_its_digest(tmp_path: Path) -> None:
    """Over TLS the body goes out in `sendall` pieces (no plain socket to send blocks on):
    the same bytes and trailing digest arrive, and a busy answer is tried again."""
    ca = create_ca(tmp_path / "ca")
    pair = issue_certificate(ca, tmp_path, "controller", ["127.0.0.1"])
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(pair.cert_path, pair.key_path)
    trusting = ssl.create_default_context(cafile=str(ca.cert_path))
    server = _UploadServer(served)
    busy = {"error": {"code": "busy", "message": "all slots taken"}}
    server.answers = [(503, busy, {"Retry-After": "0"})]
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    moved: list[int] = []
    try:
        with LightClient([server.url], ssl_context=trusting, transfer=fast()) as client:
            assert client.upload(path, lambda n, _: moved.append(n)) == "u7"
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    assert [s["sha256"] for s in server.seen] == [DIGEST, DIGEST]
    assert [s["trailer"] for s in server.seen] == [DIGEST, DIGEST]
    assert moved[-1] == len(DATA)


# --- the CLI's sinks -------------------------------------------------------------------------


async def test_the_stdout_sink_writes_every_byte_through_short_and_blocked_writes() -> None:
    """A non-blocking pipe takes at most its buffer per write(): the sink must go on where
    the kernel stopped, and wait when it takes nothing."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read_fd, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    sink = FdSink(write_fd)
    try:
        for start in range(0, len(DATA), 1 << 20):
            await sink.write(DATA[start : start + (1 << 20)])
    finally:
        os.close(write_fd)
        reader.join()
        os.close(read_fd)
    assert bytes(received) == DATA and sink.written == len(DATA)
    assert not await sink.restart()


async def test_a_file_sink_takes_its_name_only_when_kept(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    sink = FileSink(target)
    await sink.write(b"partial")
    assert not target.exists() and sink.part.exists()
    sink.discard()
    assert not target.exists() and not sink.part.exists()
    sink = FileSink(target)
    await sink.write(b"x" * 10)
    assert await sink.restart()
    await sink.write(DATA)
    sink.keep()
    assert target.read_bytes() == DATA and not sink.part.exists()


# A controller from before `X-XCE-SHA256: trailing` refuses the value before it reads the
# body, with this message (its check of the header as it was).
OLD_REFUSAL = {
    "error": {
        "code": "invalid_request",
        "message": "upload: X-XCE-SHA256 must be the 64 hex digits of the body's SHA-256",
    }
}


def test_an_older_controllers_refusal_is_told_from_a_newer_ones_whatever_the_file() -> None:
    """The refusal's message starts with the file's name, which may hold any word: an
    output called `trailing_edge.dat` refused by an older controller still falls back, and
    a newer controller's refusal (which offers the trailing form) never does."""
    from xce.client.transfer import refuses_trailing

    old = "X-XCE-SHA256 must be the 64 hex digits of the body's SHA-256"
    assert refuses_trailing(ApiError(400, "invalid_request", f"results/trailing_edge.dat: {old}"))
    assert refuses_trailing(ApiError(400, "invalid_request", f"upload: {old}"))
    newer = f"trailing.bin: {old}, or 'trailing'"
    assert not refuses_trailing(ApiError(400, "invalid_request", newer))
    assert not refuses_trailing(ApiError(413, "too_large", f"upload: {old}"))


async def test_send_file_hashes_first_for_a_controller_before_trailing_digests(
    server: tuple[str, Behaviour], tmp_path: Path
) -> None:
    url, b = server
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    b.upload_answers = [(400, OLD_REFUSAL, {})]
    async with XceClient([url], transfer=fast(attempts=1)) as client:
        assert await client.upload(path) == "u1"  # the refusal was not a try
        assert await client.upload(path) == "u1"
    first, second, third = b.uploads
    assert first["headers"]["X-XCE-SHA256"] == "trailing"
    # Then the digest before the body, and the file alone: for this client from now on.
    for seen in (second, third):
        assert seen["headers"]["X-XCE-SHA256"] == DIGEST and seen["sha256"] == DIGEST
        assert seen["headers"]["Content-Length"] == str(len(DATA))


def test_light_upload_hashes_first_for_a_controller_before_trailing_digests(
    upload_server: _UploadServer, tmp_path: Path
) -> None:
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    upload_server.answers = [(400, OLD_REFUSAL, {})]
    hashed: list[int] = []
    with LightClient([upload_server.url], transfer=fast(attempts=1)) as client:
        assert client.upload(path, hashing=lambda n, _: hashed.append(n)) == "u7"
    first, second = upload_server.seen
    assert first["headers"]["X-XCE-SHA256"] == "trailing"
    assert second["headers"]["X-XCE-SHA256"] == DIGEST and second["sha256"] == DIGEST
    assert second["trailer"] is None and hashed[-1] == len(DATA)


async def test_a_file_that_shrinks_while_sent_is_an_error_not_a_retry(
    server: tuple[str, Behaviour], tmp_path: Path
) -> None:
    """The body is read ahead while earlier pieces go out: a file shorter than the size
    the sender took is raised as OSError (the file, not the link) and never sent again."""
    url, b = server
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    with path.open("rb") as f:
        async with XceClient([url], transfer=fast()) as client:
            with pytest.raises(OSError, match="shrank"):
                await client.send_file(
                    "POST", "/api/v1/uploads", f.fileno(), len(DATA) + 10, what="in.bin"
                )
    assert b.uploads == []  # the body was not taken


def test_a_file_that_shrinks_while_the_light_client_sends_it_is_an_error(
    upload_server: _UploadServer, tmp_path: Path
) -> None:
    path = tmp_path / "in.bin"
    path.write_bytes(DATA)
    with (
        path.open("rb") as f,
        LightClient([upload_server.url], transfer=fast()) as light,
        pytest.raises(OSError, match="shrank"),
    ):
        light._send_file(
            "POST", "/api/v1/uploads", f.fileno(), len(DATA) + 10, "in.bin", None, None
        )
    assert len(upload_server.seen) <= 1  # one try at most: the file, not the link, failed


def test_a_lazy_progress_line_appears_only_once_it_moves() -> None:
    """`xce job submit --stage-in` on a terminal: the "hashing" line is drawn only for a
    controller that wants the digest before the body; otherwise nothing hashes first and
    an empty bar would stay on the screen."""
    with Bars(True) as bars:
        assert bars._progress is not None
        hashing = bars.track("hashing in.bin", lazy=True)
        sending = bars.track("in.bin")
        assert hashing is not None and sending is not None
        assert [t.description for t in bars._progress.tasks] == ["in.bin"]
        hashing(10, 20)
        assert [t.description for t in bars._progress.tasks] == ["in.bin", "hashing in.bin"]
        hashing(20, 20)
        assert len(bars._progress.tasks) == 2
