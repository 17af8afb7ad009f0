"""`XceClient`: talks to whichever controller in the candidate list answers.

Clients are given the ordered candidate list, not one address. A request that cannot connect
(or gets 503 "not primary") moves on to the next candidate and remembers the one that
worked, so the CLI, TUI and workers follow a failover without being restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import ssl
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from xce.client.errors import (
    ApiError,
    default_ca_note,
    job_path,
    no_controller,
    not_primary_reason,
    tls_error,
)
from xce.client.sse import StreamEvent, read_events
from xce.client.transfer import (
    CHUNK_BYTES,
    DEFAULT_IDLE_TIMEOUT_S,
    DIGEST_BYTES,
    DIGEST_HEADER,
    DRAIN_POLL_S,
    SEND_PIECE,
    TRAILING,
    Progress,
    TransferPolicy,
    broken,
    content_range,
    digest_of,
    gave_up,
    hash_fd,
    is_final,
    mismatch,
    refuses_trailing,
    retry_after,
    stalled,
    unsent_bytes,
)
from xce.client.transport import check_controller_urls, unix_path
from xce.store.lane import Lane

# How many chunks an upload reads and hashes ahead of the one it sends.
READ_AHEAD = 3
# A download's chunk this large or larger is hashed in a thread (`_Receiving.hash`): the
# loop reads the next one meanwhile.
HASH_IN_THREAD = 256 << 10
# The sockets the connections of an upload in this context used, last one last (set by
# `_send_body`, appended by the transfers' connectors): the body waits on the last one.
_UPLOAD_SOCKETS: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "xce_upload_sockets", default=None
)


async def _noted(conn: Any) -> Any:
    """`conn` (a new or pooled connection), its socket noted for an upload in progress."""
    sockets = _UPLOAD_SOCKETS.get()
    if sockets is not None and conn.transport is not None:
        sockets.append(conn.transport.get_extra_info("socket"))
    return conn


class _BulkTCPConnector(aiohttp.TCPConnector):
    """The transfers' TCP connections: an upload learns which socket its body goes on."""

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> Any:
        return await _noted(await super().connect(req, traces, timeout))


class _BulkUnixConnector(aiohttp.UnixConnector):
    """`_BulkTCPConnector` over the local socket."""

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> Any:
        return await _noted(await super().connect(req, traces, timeout))


class Sink(Protocol):
    """Where a download's bytes go (stdout, a file of the CLI's, a job's input written as its
    user). `write` must take all of `data`; `restart` drops what was written and returns
    True, or returns False where that cannot be undone (a pipe): the download then skips
    the bytes it already delivered instead."""

    async def write(self, data: bytes) -> None: ...

    async def restart(self) -> bool: ...


@dataclass(frozen=True)
class Received:
    """A finished download: its size, its SHA-256, and whether the server declared one it
    was checked against (an older controller does not)."""

    size: int
    sha256: str
    verified: bool
    # The server answered 304 to `if_none_match`: nothing was received, the caller's copy
    # (whose SHA-256 it named) is the file.
    unchanged: bool = False


@dataclass
class _Receiving:
    """A download's progress across its tries."""

    held: int = 0  # bytes the sink holds (or delivered, for a sink that cannot restart)
    size: int | None = None  # the whole file, once an answer said
    digest: str | None = None  # the server's X-XCE-SHA256, once an answer said
    skip: int = 0  # bytes of the current answer the sink already has (a 200 to a Range)
    etag: str | None = None  # the first answer's ETag: sent as If-Range when resuming
    hasher: Any = field(default_factory=hashlib.sha256)
    validator: str | None = None  # the ETag of the caller's copy (If-None-Match)
    unchanged: bool = False  # the server said that copy is current (304)
    # Hashes the chunks in a thread of its own while the next ones arrive, once the body
    # is large (a small one is hashed as it comes, with no thread to start); each chunk
    # goes with the hasher it belongs to, so a `reset` never mixes two bodies.
    lane: Lane[tuple[Any, bytes]] | None = None

    def reset(self) -> None:
        self.held, self.skip, self.hasher = 0, 0, hashlib.sha256()

    async def hash(self, chunk: bytes) -> None:
        if self.lane is None and len(chunk) < HASH_IN_THREAD:
            self.hasher.update(chunk)
            return
        if self.lane is None:
            self.lane = Lane(_update, name="xce-download-hash")
        await self.lane.put((self.hasher, chunk))

    async def hexdigest(self) -> str:
        """The SHA-256 of what was received, once every chunk is hashed."""
        if self.lane is not None:
            lane, self.lane = self.lane, None
            await lane.finish()
        return str(self.hasher.hexdigest())

    async def close(self) -> None:
        """Stop hashing (the download failed) and wait for the lane's thread."""
        if self.lane is not None:
            lane, self.lane = self.lane, None
            lane.stop()
            await asyncio.wrap_future(lane.done)


def _update(item: tuple[Any, bytes]) -> None:
    item[0].update(item[1])


class _Busy(Exception):
    """503 `busy`: ask again after `wait_s`."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.message, self.wait_s = message, wait_s


class _SourceError(Exception):
    """Reading the file being sent failed: final, whatever the connection did."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class XceClient:
    def __init__(
        self,
        controllers: Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        retry_for: float = 0.0,
        ssl_context: ssl.SSLContext | None = None,
        insecure: bool = False,
        ca_note: str | None = None,
        transfer_idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        transfer: TransferPolicy | None = None,
    ) -> None:
        """`ssl_context` (from `xce.auth.pki.client_ssl_context`) verifies https://
        controllers against the cluster CA and may carry a client certificate; without it
        https:// uses the system trust store. Plain http:// off loopback raises
        InsecureTransport unless `insecure`. `ca_note` (`xce.client.errors.ca_note`) names
        the CA file and its setting in the message of a TLS failure.

        `timeout` bounds one ordinary request as a whole; file transfers (`download_to`,
        `send_file`, `upload`) are bounded by `transfer` instead (default: idle for
        `transfer_idle_timeout_s`, connect within `timeout`): a body of any size may take
        as long as it keeps moving."""
        if not controllers:
            raise ValueError("at least one controller URL is needed")
        check_controller_urls(controllers, insecure)
        self.ssl_context = ssl_context
        self.ca_note = ca_note or default_ca_note(ssl_context)
        self.controllers = [c.rstrip("/") for c in controllers]
        # A local socket (`unix:PATH`, the only candidate when chosen): requests go through
        # it to http://localhost.
        self.socket_path = unix_path(self.controllers[0])
        if self.socket_path is not None:
            self.controllers = ["http://localhost"]
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for
        self._current = 0
        # The newest primary term seen in any answer; sent with every request so that an
        # old primary that comes back learns it was replaced (xce/ha/node.py).
        self.epoch = 0
        self._session: aiohttp.ClientSession | None = None
        self.transfer = transfer or TransferPolicy(
            idle_timeout_s=transfer_idle_timeout_s, connect_timeout_s=timeout
        )
        # File transfers get connections of their own: a heartbeat, a finish report or a
        # poll never waits for a pool slot behind a long upload or download.
        self._bulk_session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(self.transfer.concurrent)
        # A controller refused `X-XCE-SHA256: trailing` (it predates it): hash files first.
        self._digest_first = False

    async def __aenter__(self) -> XceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for session in (self._session, self._bulk_session):
            if session is not None:
                await session.close()
        self._session = self._bulk_session = None

    def _headers(self) -> dict[str, str]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _get_session(self, bulk: bool = False) -> aiohttp.ClientSession:
        session = self._bulk_session if bulk else self._session
        if session is None or session.closed:
            # Transfers: no pool limit (each one's own connection; their number is the
            # caller's to bound), so none waits for a slot with its idle clock running.
            limit = 0 if bulk else 100
            connector: aiohttp.BaseConnector
            unix = _BulkUnixConnector if bulk else aiohttp.UnixConnector
            tcp = _BulkTCPConnector if bulk else aiohttp.TCPConnector
            if self.socket_path is not None:
                connector = unix(path=self.socket_path, limit=limit)
            else:
                connector = tcp(ssl=self.ssl_context or True, limit=limit)
            session = aiohttp.ClientSession(headers=self._headers(), connector=connector)
            if bulk:
                self._bulk_session = session
            else:
                self._session = session
        return session

    @property
    def base_url(self) -> str:
        return self.controllers[self._current]

    async def _send(
        self,
        method: str,
        path: str,
        *,
        timeout: float | aiohttp.ClientTimeout | None = None,
        bulk: bool = False,
        data_factory: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> aiohttp.ClientResponse:
        """Send to the current candidate, rotating through the list on connection failure.

        `bulk`: on the transfers' own connections. `data_factory`: a fresh body for each
        candidate tried (a streamed body cannot be sent twice)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        last: Exception | None = None
        client_timeout = (
            timeout
            if isinstance(timeout, aiohttp.ClientTimeout)
            else aiohttp.ClientTimeout(total=timeout or self.timeout)
        )
        extra_headers = dict(kwargs.pop("headers", None) or {})
        refusals: dict[int, str] = {}  # candidates that answered "not the primary", and why
        while True:
            for step in range(len(self.controllers)):
                index = (self._current + step) % len(self.controllers)
                url = self.controllers[index] + path
                headers = dict(extra_headers)
                if self.epoch:
                    headers["X-XCE-Epoch"] = str(self.epoch)
                if data_factory is not None:
                    kwargs["data"] = data_factory()
                try:
                    resp = await self._get_session(bulk).request(
                        method, url, timeout=client_timeout, headers=headers, **kwargs
                    )
                except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                    last = exc
                    refusals.pop(index, None)
                    continue
                epoch = resp.headers.get("X-XCE-Epoch", "")
                if epoch.isdigit() and int(epoch) > self.epoch:
                    self.epoch = int(epoch)
                if resp.status == 503 and resp.headers.get("X-XCE-Not-Primary"):
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        refusals[index] = not_primary_reason(
                            self.controllers[index], await resp.content.read(4096)
                        )
                    resp.release()
                    continue
                self._current = index
                return resp
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.5)
        tried = ", ".join(self.controllers)
        if isinstance(last, aiohttp.ClientSSLError):  # a TLS refusal, not a dead controller
            raise tls_error(tried, last, self.ca_note)
        raise ApiError(0, "unreachable", no_controller(tried, last, list(refusals.values())))

    @staticmethod
    async def _check(resp: aiohttp.ClientResponse) -> None:
        if resp.status < 400:
            return
        text = await resp.text()
        try:
            err = json.loads(text)["error"]
            raise ApiError(resp.status, err.get("code", "error"), err.get("message", text))
        except (ValueError, KeyError, TypeError):
            raise ApiError(resp.status, "http_error", text[:200] or resp.reason or "") from None

    async def request(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        resp = await self._send(method, path, timeout=timeout, **kwargs)
        async with resp:
            await self._check(resp)
            if resp.content_type == "application/json":
                return await resp.json()
            return await resp.read()

    # --- file transfers (xce/client/transfer.py has the rules) ---------------------------

    def _peer(self) -> str:
        return f"unix:{self.socket_path}" if self.socket_path else self.base_url

    def _transfer_timeout(self) -> aiohttp.ClientTimeout:
        """No total: connecting is bounded, and each wait for the next byte."""
        policy = self.transfer
        return aiohttp.ClientTimeout(
            total=None,
            sock_connect=policy.connect_timeout_s,
            sock_read=policy.idle_timeout_s,
        )

    async def _check_transfer(self, resp: aiohttp.ClientResponse) -> None:
        """`_check`, with 503 `busy` as `_Busy` (retried after its Retry-After)."""
        if resp.status == 503:
            try:
                await self._check(resp)
            except ApiError as exc:
                if exc.code == "busy":
                    cap = self.transfer.max_busy_wait_s
                    wait = retry_after(resp.headers.get("Retry-After"), cap)
                    raise _Busy(f"the controller is busy: {exc.message}", wait) from None
                raise
        await self._check(resp)

    async def download_to(
        self,
        path: str,
        sink: Sink,
        *,
        what: str,
        params: dict[str, str] | None = None,
        progress: Progress | None = None,
        if_none_match: str | None = None,
    ) -> Received:
        """GET `path` into `sink`, chunk by chunk, resuming from the byte the sink holds.

        A broken connection, a stall (no byte for the idle timeout), a server error or a
        busy answer is tried again, at most `transfer.attempts` times in all, with doubling
        waits; a final answer (404, 403...) is raised at once. The bytes are hashed as they
        arrive and checked against the server's X-XCE-SHA256: a mismatch raises ApiError
        `digest_mismatch` (the caller removes what the sink holds). An older controller
        without the header, or one that answers a Range request with the whole file (200),
        is tolerated: unverified, and restarted from byte 0 (or, for a sink that cannot
        restart, the bytes it has are skipped). Errors are one line naming `what`, the
        bytes moved and the peer. `if_none_match`: the SHA-256 of a copy the caller holds;
        while nothing is received the server is asked to answer 304 if it is still the
        file (`Received.unchanged`, nothing written to the sink)."""
        got = _Receiving()
        got.validator = f'"{if_none_match}"' if if_none_match else None
        try:
            await self._tries(
                lambda: self._receive(path, params, sink, got, what, progress), got, what
            )
            actual = await got.hexdigest()
        finally:
            await got.close()
        if got.unchanged:
            assert got.validator is not None
            return Received(0, got.validator.strip('"'), True, unchanged=True)
        if got.digest is not None and actual != got.digest:
            raise mismatch(what, got.held, self._peer(), "not kept")
        return Received(got.held, actual, got.digest is not None)

    async def _tries(
        self, receive: Callable[[], Awaitable[None]], got: _Receiving, what: str
    ) -> None:
        """`download_to`'s tries of `receive`, until one has the whole file or the tries
        are spent."""
        policy = self.transfer
        tries = 0
        while True:
            wait = policy.wait_s(tries + 1)
            try:
                async with self._slots:
                    await receive()
                break
            except _Busy as exc:
                problem = broken(what, got.held, got.size, self._peer(), exc.message)
                wait = exc.wait_s
            except ApiError as exc:
                if is_final(exc):
                    raise
                problem = broken(what, got.held, got.size, self._peer(), exc.message)
            except TimeoutError:
                problem = stalled(what, got.held, got.size, self._peer(), policy.idle_timeout_s)
            except aiohttp.ClientError as exc:
                why = str(exc) or type(exc).__name__
                problem = broken(what, got.held, got.size, self._peer(), why)
            tries += 1
            if tries >= policy.attempts:
                raise ApiError(0, "transfer_failed", gave_up(problem, tries))
            await asyncio.sleep(wait)

    async def _receive(
        self,
        path: str,
        params: dict[str, str] | None,
        sink: Sink,
        got: _Receiving,
        what: str,
        progress: Progress | None,
    ) -> None:
        """One try of `download_to`: from byte `got.held` to the end, or an exception."""
        loop = asyncio.get_running_loop()
        idle = self.transfer.idle_timeout_s
        # identity: the bytes of the file itself (a Range and the digest are about those)
        headers = {"Accept-Encoding": "identity"}
        if got.validator and not got.held and got.etag is None:
            headers["If-None-Match"] = got.validator  # no byte yet: ask whether ours is it
        if got.held:
            headers["Range"] = f"bytes={got.held}-"
            if got.etag:  # a file replaced meanwhile then comes whole, not a foreign range
                headers["If-Range"] = got.etag
        # The idle clock: pushed back whenever bytes arrive, stopped while the sink writes
        # (a slow reader of our stdout is not a stalled controller).
        async with asyncio.timeout(idle) as deadline:
            resp = await self._send(
                "GET",
                path,
                timeout=self._transfer_timeout(),
                bulk=True,
                params=params,
                headers=headers,
            )
            async with resp:
                if resp.status == 304 and "If-None-Match" in headers:
                    if resp.headers.get("ETag") != got.validator:
                        raise ApiError(0, "http_error", f"{what}: a 304 for another file")
                    got.unchanged = True
                    return
                if resp.status == 416 and got.held:
                    # Past the end: the file is not the one we started (it shrank).
                    if not await sink.restart():
                        raise ApiError(0, "changed", f"{what} changed while it was downloaded")
                    got.reset()
                    raise ApiError(0, "restart", f"{what} changed: starting again")
                await self._check_transfer(resp)
                await self._start_body(resp, sink, got, what)
                if progress is not None:
                    progress(got.held, got.size)
                async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                    if got.skip:
                        dropped = min(got.skip, len(chunk))
                        got.skip -= dropped
                        chunk = chunk[dropped:]
                        if not chunk:
                            continue
                    await got.hash(chunk)
                    deadline.reschedule(None)
                    await sink.write(chunk)
                    got.held += len(chunk)
                    deadline.reschedule(loop.time() + idle)
                    if progress is not None:
                        progress(got.held, got.size)
        if got.skip or (got.size is not None and got.held != got.size):
            raise ApiError(0, "short", "the connection ended before the whole file")

    async def _start_body(
        self, resp: aiohttp.ClientResponse, sink: Sink, got: _Receiving, what: str
    ) -> None:
        """Check an answer's headers against what the earlier tries saw, and decide where
        its body starts: a 206 must continue at `got.held`; a 200 is the whole file again
        (restart the sink, or skip what it has)."""
        digest = digest_of(resp.headers)
        if resp.status == 206:
            parsed = content_range(resp.headers.get("Content-Range"))
            if parsed is None or parsed[0] != got.held:
                raise ApiError(
                    0,
                    "bad_range",
                    f"{what}: asked for bytes {got.held}- and got "
                    f"{resp.headers.get('Content-Range')!r} from {self._peer()}",
                )
            size: int | None = parsed[1]
        elif resp.status == 200:
            size = resp.content_length
        else:
            raise ApiError(0, "http_error", f"{what}: unexpected answer {resp.status}")
        changed = (got.digest is not None and digest != got.digest) or (
            got.size is not None and size is not None and size != got.size
        )
        if changed or (resp.status == 200 and got.held):
            if await sink.restart():
                got.reset()
            elif changed:
                raise ApiError(0, "changed", f"{what} changed while it was downloaded")
            else:
                got.skip = got.held
        got.size, got.digest = size, digest
        etag = resp.headers.get("ETag")
        got.etag = etag if etag and not etag.startswith("W/") else None  # strong ones only

    async def send_file(
        self,
        method: str,
        path: str,
        fd: int,
        size: int,
        *,
        what: str,
        params: dict[str, str] | None = None,
        progress: Progress | None = None,
        unreachable_ends: bool = False,
    ) -> Any:
        """Send the first `size` bytes behind `fd` as the body of `method path`, streamed
        with pread in chunks (the descriptor's offset is left alone) and hashed as they are
        read: one pass over the file, its SHA-256 sent after it (`X-XCE-SHA256: trailing`;
        against a controller that predates that form, hashed in a first pass and declared
        before the body). Retried from byte 0 on a broken connection, a stall, a server
        error, a busy answer or a refused digest (the file may have changed), at most
        `transfer.attempts` times; a final answer (413 too_large, ...) is raised at once.
        Returns the parsed answer. A file that cannot be read (or shrank) raises OSError.
        `unreachable_ends`: when no controller answers at all, raise ApiError(0,
        "unreachable") at once instead of trying again (a caller with its own schedule, the
        worker's report loop)."""
        policy = self.transfer
        digest = await asyncio.to_thread(hash_fd, fd, size) if self._digest_first else None
        tries = 0
        while True:
            wait = policy.wait_s(tries + 1)
            moved = [0]
            try:
                async with self._slots:
                    return await self._send_body(
                        method, path, fd, size, digest, params, moved, progress
                    )
            except _SourceError as exc:
                raise exc.error from None
            except _Busy as exc:
                problem = broken(what, moved[0], size, self._peer(), exc.message)
                wait = exc.wait_s
            except ApiError as exc:
                if digest is None and refuses_trailing(exc):
                    self._digest_first = True  # an older controller: not a try
                    digest = await asyncio.to_thread(hash_fd, fd, size)
                    continue
                if is_final(exc) or (unreachable_ends and exc.code == "unreachable"):
                    raise
                if exc.code == "digest_mismatch" and digest is not None:
                    digest = await asyncio.to_thread(hash_fd, fd, size)
                problem = broken(what, moved[0], size, self._peer(), exc.message)
            except TimeoutError:
                problem = stalled(what, moved[0], size, self._peer(), policy.idle_timeout_s)
            except aiohttp.ClientError as exc:
                why = str(exc) or type(exc).__name__
                problem = broken(what, moved[0], size, self._peer(), why)
            tries += 1
            if tries >= policy.attempts:
                raise ApiError(0, "transfer_failed", gave_up(problem, tries))
            await asyncio.sleep(wait)

    async def _send_body(
        self,
        method: str,
        path: str,
        fd: int,
        size: int,
        digest: str | None,
        params: dict[str, str] | None,
        moved: list[int],
        progress: Progress | None,
    ) -> Any:
        """One try of `send_file`; `digest` None: the file's SHA-256 trails it."""
        loop = asyncio.get_running_loop()
        idle = self.transfer.idle_timeout_s
        async with asyncio.timeout(idle) as deadline:

            async def body() -> AsyncIterator[bytes | memoryview]:
                offset = 0
                hasher = hashlib.sha256()
                # The next chunks are read and hashed in a thread of their own, up to
                # READ_AHEAD of them, while this one is sent (an empty file needs none).
                reader = Lane(_read_hashed, READ_AHEAD, "xce-upload-read") if size else None
                ahead: deque[asyncio.Future[bytes]] = deque()
                planned = 0

                async def plan() -> None:
                    nonlocal planned
                    while planned < size and len(ahead) < READ_AHEAD:
                        n = min(CHUNK_BYTES, size - planned)
                        got: asyncio.Future[bytes] = loop.create_future()
                        ahead.append(got)
                        assert reader is not None  # made whenever there is a byte to read
                        await reader.put(_Read(fd, n, planned, hasher, got, loop))
                        planned += n

                try:
                    await plan()
                    while ahead:
                        try:
                            chunk = await ahead.popleft()
                        except OSError as exc:
                            raise _SourceError(exc) from None
                        if len(chunk) < min(CHUNK_BYTES, size - offset):
                            # A short read of a regular file is its end, before `size`.
                            ends = offset + len(chunk)
                            shrank = OSError(f"the file shrank to {ends} bytes while it was sent")
                            raise _SourceError(shrank)
                        await plan()
                        # Handed over in pieces (views, not copies): each is back here once
                        # aiohttp wrote it and the socket drained, so the idle clock sees a
                        # slow link move.
                        view = memoryview(chunk)
                        for start in range(0, len(chunk), SEND_PIECE):
                            piece = view[start : start + SEND_PIECE]
                            yield piece
                            offset += len(piece)
                            moved[0] = offset
                            deadline.reschedule(loop.time() + idle)
                            if progress is not None:
                                progress(offset, size)
                finally:
                    # A try cut short: reads may still run in the lane's thread, so wait
                    # for it; the caller may close `fd` next, and a read of a number
                    # reused for another file must never happen.
                    for abandoned in ahead:
                        abandoned.cancel()  # never awaited now: its read's outcome is moot
                    if reader is not None:
                        reader.stop()
                        await asyncio.shield(asyncio.wrap_future(reader.done))
                if digest is None:
                    yield hasher.hexdigest().encode()  # the file as read is what is declared
                # Every byte is handed over, not yet carried: a slow link may take longer
                # than the idle timeout to empty the kernel's buffer. That is progress as
                # long as the peer acknowledges more; the answer is waited for after it.
                sock = sockets[-1] if sockets else None
                left = unsent_bytes(sock) if sock is not None else None
                while left:
                    await asyncio.sleep(DRAIN_POLL_S)
                    now = unsent_bytes(sock)
                    if now is not None and now < left:
                        deadline.reschedule(loop.time() + idle)
                    left = now

            failure: list[_SourceError] = []
            sockets: list[Any] = []

            def fresh() -> AsyncIterator[bytes | memoryview]:
                moved[0] = 0
                return _noting(body(), failure)

            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size if digest else size + DIGEST_BYTES),
                DIGEST_HEADER: digest or TRAILING,
            }
            noting = _UPLOAD_SOCKETS.set(sockets)  # the connectors append to it
            try:
                resp = await self._send(
                    method,
                    path,
                    timeout=self._transfer_timeout(),
                    bulk=True,
                    params=params,
                    headers=headers,
                    data_factory=fresh,
                    # the controller may refuse (413, busy) before a byte of the body moves
                    expect100=True,
                )
            except (ApiError, aiohttp.ClientError, TimeoutError):
                if failure:
                    raise failure[0] from None
                raise
            finally:
                _UPLOAD_SOCKETS.reset(noting)
            async with resp:
                await self._check_transfer(resp)
                if resp.content_type == "application/json":
                    return await resp.json()
                return await resp.read()

    # --- jobs -------------------------------------------------------------------------

    async def submit(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """Returns {"job_id": ..., "queue": ...}. One Idempotency-Key per call, sent again
        with every retry on another candidate: a submission that reached a primary which
        then failed before answering is found, not made twice."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        return await self.request("POST", "/api/v1/jobs", json=body, headers=headers)

    async def jobs(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return await self.request("GET", "/api/v1/jobs", params=params)

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}")

    async def control(self, job_id: str, action: str) -> dict[str, Any]:
        return await self.request("POST", f"/api/v1/jobs/{job_path(job_id)}/{action}")

    async def files(self, job_id: str) -> list[dict[str, Any]]:
        return (await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}/files"))["files"]

    async def download(
        self, job_id: str, name: str, sink: Sink, progress: Progress | None = None
    ) -> Received:
        """A job's file (stdout, stderr or an output), streamed into `sink` (see
        `download_to`)."""
        path = f"/api/v1/jobs/{job_path(job_id)}/files/{quote(name)}"
        return await self.download_to(path, sink, what=name, progress=progress)

    async def tail(
        self,
        job_id: str,
        stream: str = "stdout",
        offset: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """`GET /api/v1/jobs/{id}/tail`: {"offset", "next_offset", "end", "data",
        "truncated", "running", "state", "attempt", ...}. Without `offset`, the latest
        bytes; with it, the bytes from there (ask again from `next_offset`)."""
        params = {"stream": stream}
        if offset is not None:
            params["offset"] = str(offset)
        if limit is not None:
            params["limit"] = str(limit)
        return await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}/tail", params=params)

    async def upload(self, path: Path, progress: Progress | None = None) -> str:
        """Stage `path` as an input (`POST /api/v1/uploads`): hashed, then streamed with its
        digest (see `send_file`). Returns the upload id."""
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            result = await self.send_file(
                "POST",
                "/api/v1/uploads",
                f.fileno(),
                size,
                what=f"upload of {path}",
                progress=progress,
            )
        return str(result["upload_id"])

    async def delete_upload(self, upload_id: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/api/v1/uploads/{upload_id}")

    # --- queues, hosts, cluster -------------------------------------------------------

    async def queues(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/queues"))["queues"]

    async def create_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/queues", json=body)

    async def queue_action(self, name: str, action: str) -> dict[str, Any]:
        return await self.request("POST", f"/api/v1/queues/{quote(name)}/{action}")

    async def hosts(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/hosts"))["hosts"]

    async def host(self, name: str) -> dict[str, Any]:
        return await self.request("GET", f"/api/v1/hosts/{quote(name)}")

    async def host_action(self, name: str, action: str, reason: str = "") -> dict[str, Any]:
        body = {"reason": reason} if reason else {}
        return await self.request("POST", f"/api/v1/hosts/{quote(name)}/{action}", json=body)

    async def cluster(self) -> dict[str, Any]:
        return await self.request("GET", "/api/v1/cluster")

    async def switchover(self, to: str | None = None) -> dict[str, Any]:
        """`POST /api/v1/cluster/switchover`: the primary hands its role to a caught-up
        standby (`to`, or whichever is ready). Returns {"primary", "previous", "epoch"};
        409 when no standby is connected and caught up."""
        body = {"to": to.rstrip("/")} if to else {}
        return await self.request("POST", "/api/v1/cluster/switchover", json=body)

    async def health(self, url: str, timeout: float = 2.0) -> dict[str, Any]:
        """`GET /healthz` of one candidate, not rotating: its role, epoch, log end and the
        primary it knows. For views of a cluster that has no primary at the moment.
        Raises ApiError(0, "unreachable") when that candidate does not answer."""
        try:
            async with self._get_session().get(
                url.rstrip("/") + "/healthz", timeout=aiohttp.ClientTimeout(total=timeout)
            ) as resp:
                await self._check(resp)
                return dict(await resp.json(content_type=None))
        except aiohttp.ClientSSLError as exc:
            raise tls_error(url, exc, self.ca_note) from None
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
            raise ApiError(0, "unreachable", f"{url}: {exc or type(exc).__name__}") from None

    # --- identity (xce.api.auth, xce.api.users, xce.api.audit) ---------------------------

    async def users(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/users"))["users"]

    async def add_user(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/users", json=body)

    async def set_password(
        self, user: str, password: str, old_password: str | None = None
    ) -> dict[str, Any]:
        body = {"password": password}
        if old_password is not None:
            body["old_password"] = old_password
        return await self.request(
            "POST", f"/api/v1/users/{quote(user, safe='')}/password", json=body
        )

    async def delete_user(self, user: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/api/v1/users/{quote(user, safe='')}")

    async def service_token(self, name: str, role: str, ttl_s: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "role": role}
        if ttl_s:
            body["ttl_s"] = ttl_s
        return await self.request("POST", "/api/v1/auth/tokens", json=body)

    async def revoke(self, user: str) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/auth/revoke", json={"user": user})

    async def rotate_key(self) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/auth/keys/rotate")

    async def audit(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return await self.request("GET", "/api/v1/audit", params=params)

    async def file_usage(self, user: str | None = None) -> dict[str, Any]:
        """`GET /api/v1/files/usage`: what each user's files hold against the quota."""
        params = {"user": user} if user else {}
        return await self.request("GET", "/api/v1/files/usage", params=params)

    async def whoami(self) -> dict[str, Any] | None:
        """`GET /api/v1/auth/whoami`, or None where the controller has no such endpoint."""
        try:
            return await self.request("GET", "/api/v1/auth/whoami")
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise

    async def login(self, username: str, password: str) -> dict[str, Any]:
        """`POST /api/v1/auth/login`; on success later requests carry the returned token."""
        result = await self.request(
            "POST", "/api/v1/auth/login", json={"username": username, "password": password}
        )
        self.set_token(result["token"])
        return result

    async def device_start(self) -> dict[str, Any]:
        """`POST /api/v1/auth/device`: the OIDC device code and the URL to show the user."""
        return await self.request("POST", "/api/v1/auth/device")

    async def device_token(self, device_code: str) -> dict[str, Any]:
        """`POST /api/v1/auth/device/token`; raises ApiError(400, authorization_pending...)."""
        result = await self.request(
            "POST", "/api/v1/auth/device/token", json={"device_code": device_code}
        )
        self.set_token(result["token"])
        return result

    def set_token(self, token: str | None) -> None:
        """Use `token` from now on (the session is rebuilt with the new header)."""
        self.token = token
        for old in (self._session, self._bulk_session):
            if old is not None and not old.closed:
                asyncio.get_running_loop().create_task(old.close())
        self._session = self._bulk_session = None

    async def events(
        self, last_id: str | None = None, keepalive: int = 15
    ) -> AsyncIterator[StreamEvent]:
        """The live change stream (`GET /api/v1/events`), resuming after `last_id`.

        Yields `StreamEvent`s until the connection ends; then raises ApiError(0, "stream_lost")
        so the caller reconnects with the last id it saw (possibly to another candidate). The
        read times out after three missed keepalives, so a dead controller is noticed.
        """
        headers = {"Last-Event-ID": last_id} if last_id else {}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout, sock_read=keepalive * 3
        )
        resp = await self._send(
            "GET",
            "/api/v1/events",
            timeout=timeout,
            headers=headers,
            params={"keepalive": str(keepalive)},
        )
        async with resp:
            await self._check(resp)
            try:
                async for event in read_events(resp.content):
                    yield event
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiError(0, "stream_lost", f"event stream lost: {exc}") from None
        raise ApiError(0, "stream_lost", "the controller closed the event stream")


@dataclass(frozen=True)
class _Read:
    """One chunk of an upload to read and hash: `n` bytes of `fd` at `offset`, the result
    (or the read's OSError) delivered to `got` on `loop`."""

    fd: int
    n: int
    offset: int
    hasher: Any
    got: asyncio.Future[bytes]
    loop: asyncio.AbstractEventLoop


def _read_hashed(read: _Read) -> None:
    """A lane's step: the chunk read and fed to the hasher in the same thread (hashlib lets
    go of the GIL for large buffers), one step off the event loop."""
    try:
        chunk = os.pread(read.fd, read.n, read.offset)
        read.hasher.update(chunk)
    except OSError as exc:
        read.loop.call_soon_threadsafe(_settle, read.got, None, exc)
    else:
        read.loop.call_soon_threadsafe(_settle, read.got, chunk, None)


def _settle(got: asyncio.Future[bytes], chunk: bytes | None, error: OSError | None) -> None:
    if got.done():  # abandoned (the try ended first)
        return
    if error is not None:
        got.set_exception(error)
    else:
        assert chunk is not None
        got.set_result(chunk)


async def _noting(
    body: AsyncIterator[bytes | memoryview], failure: list[_SourceError]
) -> AsyncIterator[bytes | memoryview]:
    """`body`, noting a `_SourceError` before aiohttp wraps it in a connection error."""
    try:
        async for chunk in body:
            yield chunk
    except _SourceError as exc:
        failure.append(exc)
        raise
