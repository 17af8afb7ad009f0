"""`LightClient`: the blocking one-shot client the hot CLI commands use.

Why a second client beside `XceClient`: one `xce job submit` or `xce job list` sends one or
two requests and exits, and importing aiohttp and asyncio costs several times that
(0.6 s of start-up before the first byte, against 0.04 s for `squeue`). This client uses only
the standard library (`http.client`, `ssl`, `json`) and keeps the same rules as `XceClient`:
the ordered candidate list (a refused connection or 503 "not primary" moves to the next),
the primary's epoch sent back on every request, the one-line `ApiError`s, and the same
plain-HTTP rule (`check_controller_urls`). Long-lived users (the console, workers, streams)
keep `XceClient`.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from xce.client.errors import (
    ApiError,
    default_ca_note,
    job_path,
    no_controller,
    not_primary_reason,
    tls_error,
)
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
    gave_up,
    hash_fd,
    is_final,
    refuses_trailing,
    retry_after,
    stalled,
    unsent_bytes,
)
from xce.client.transport import UnixHTTPConnection, check_controller_urls, unix_path


class LightClient:
    def __init__(
        self,
        controllers: Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        insecure: bool = False,
        ca_note: str | None = None,
        transfer_idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        transfer: TransferPolicy | None = None,
    ) -> None:
        """As `XceClient`: `ca_note` names the CA file and its setting in TLS failures;
        `upload` is bounded by `transfer` (idle for `transfer_idle_timeout_s`), never by a
        clock on the whole body. `timeout` is a socket timeout: it bounds each wait of an
        ordinary request, not its total."""
        if not controllers:
            raise ValueError("at least one controller URL is needed")
        check_controller_urls(controllers, insecure)
        self.controllers = [c.rstrip("/") for c in controllers]
        self.token = token
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.ca_note = ca_note or default_ca_note(ssl_context)
        self.epoch = 0
        self.transfer = transfer or TransferPolicy(
            idle_timeout_s=transfer_idle_timeout_s, connect_timeout_s=timeout
        )
        self._current = 0
        # A controller refused `X-XCE-SHA256: trailing` (it predates it): hash files first.
        self._digest_first = False
        self._conn: http.client.HTTPConnection | None = None
        self._conn_index = -1

    def __enter__(self) -> LightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, index: int) -> http.client.HTTPConnection:
        """One kept-alive connection, to the candidate that answered last."""
        if self._conn is not None and self._conn_index == index:
            return self._conn
        self.close()
        parts = urlsplit(self.controllers[index])
        host = parts.hostname or "127.0.0.1"
        conn: http.client.HTTPConnection
        if (path := unix_path(self.controllers[index])) is not None:
            conn = UnixHTTPConnection(path, self.timeout)
        elif parts.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                host, parts.port or 443, timeout=self.timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(host, parts.port or 80, timeout=self.timeout)
        self._conn, self._conn_index = conn, index
        return conn

    def _target(self, index: int, path: str) -> str:
        url = self.controllers[index]
        return ("" if unix_path(url) is not None else urlsplit(url).path) + path

    def _exchange(
        self,
        index: int,
        method: str,
        target: str,
        body: Any,
        headers: dict[str, str],
        timeout: float,
        carried: Callable[[Any], None] | None = None,
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """One request to candidate `index` with a socket timeout of `timeout` (each wait,
        not the whole); raises OSError or HTTPException when the connection fails. The
        newest epoch an answer carries is kept. `carried(sock)` runs once the body is
        handed over, before the answer is read."""
        conn = self._connection(index)
        conn.timeout = timeout  # a connection made now
        if conn.sock is not None:
            conn.sock.settimeout(timeout)  # a kept-alive one
        if self.epoch:
            headers = {**headers, "X-XCE-Epoch": str(self.epoch)}
        if hasattr(body, "seek"):
            body.seek(0)
        try:
            if isinstance(body, _FileBody):
                # The body goes out in the file body's own steps, not through
                # http.client's loop of 64 KiB sendall calls.
                conn.putrequest(method, target)
                for name, value in headers.items():
                    conn.putheader(name, value)
                conn.endheaders()
                assert conn.sock is not None  # endheaders connected it
                body.send_to(conn.sock)
            else:
                conn.request(method, target, body=body, headers=headers)
            if carried is not None and conn.sock is not None:
                carried(conn.sock)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # A server may refuse a body before reading it (413) and close: its answer
            # can still be waiting in our socket, and it says more than the broken pipe.
            try:
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                raise exc from None
        else:
            resp = conn.getresponse()
            data = resp.read()
        epoch = resp.getheader("X-XCE-Epoch", "")
        if epoch.isdigit() and int(epoch) > self.epoch:
            self.epoch = int(epoch)
        return resp, data

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json_body: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send to the current candidate, moving through the list when one cannot be
        reached or is not the primary. Returns parsed JSON, or bytes for other types."""
        all_headers = dict(headers or {})
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        query = f"?{urlencode(params)}" if params else ""
        last: Exception | None = None
        refusals: dict[int, str] = {}  # candidates that answered "not the primary", and why
        # A kept-alive connection the server closed meanwhile gets one fresh try.
        order = [
            (self._current + step) % len(self.controllers) for step in range(len(self.controllers))
        ]
        if self._conn is not None and self._conn_index == order[0]:
            order.insert(1, order[0])
        for index in order:
            target = self._target(index, path + query)
            try:
                resp, data = self._exchange(index, method, target, body, all_headers, self.timeout)
            except ssl.SSLError as exc:
                self.close()
                raise tls_error(self.controllers[index], exc, self.ca_note) from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            if resp.status == 503 and resp.getheader("X-XCE-Not-Primary"):
                self.close()
                refusals[index] = not_primary_reason(self.controllers[index], data)
                continue
            self._current = index
            return _decode(resp, data)
        tried = ", ".join(self.controllers)
        raise ApiError(0, "unreachable", no_controller(tried, last, list(refusals.values())))

    # --- the routes the one-shot commands use (same names as XceClient's) -----------------

    def submit(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """One Idempotency-Key per call, sent again on every candidate (see XceClient)."""
        return self.request(
            "POST",
            "/api/v1/jobs",
            json_body=body,
            headers={"Idempotency-Key": key or uuid.uuid4().hex},
        )

    def jobs(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return self.request("GET", "/api/v1/jobs", params=params)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_path(job_id)}")

    def control(self, job_id: str, action: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/jobs/{job_path(job_id)}/{action}")

    def upload(
        self, path: Path, progress: Progress | None = None, hashing: Progress | None = None
    ) -> str:
        """Stage `path` as an input (`POST /api/v1/uploads`) and return the upload id.

        The file is streamed from the descriptor and hashed as it is read (`progress` sees
        the bytes sent); its SHA-256 follows it (`X-XCE-SHA256: trailing`). A controller
        that predates that form refuses it before the body: the file is then hashed first
        (`hashing` sees that pass) and the digest goes before the body. A broken
        connection, a stall (no progress for the idle timeout), a server error, a busy
        answer (after its Retry-After) or a refused digest is tried again from byte 0, at
        most `transfer.attempts` times with doubling waits; a final answer (413 too_large,
        quota_exceeded...) is raised at once."""
        with path.open("rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            result = self._send_file(
                "POST", "/api/v1/uploads", fd, size, f"upload of {path}", progress, hashing
            )
        return str(result["upload_id"])

    def _send_file(
        self,
        method: str,
        path: str,
        fd: int,
        size: int,
        what: str,
        progress: Progress | None,
        hashing: Progress | None,
    ) -> Any:
        policy = self.transfer
        digest = hash_fd(fd, size, hashing) if self._digest_first else None
        self.close()  # a fresh connection: a kept-alive one may have been closed meanwhile
        tries = 0
        while True:
            index = self._current
            peer = self.controllers[index]
            body = _FileBody(fd, size, progress, trailing=digest is None)
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size if digest else size + DIGEST_BYTES),
                DIGEST_HEADER: digest or TRAILING,
            }
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            wait = policy.wait_s(tries + 1)
            try:
                resp, data = self._exchange(
                    index,
                    method,
                    self._target(index, path),
                    body,
                    headers,
                    policy.idle_timeout_s,
                    carried=lambda sock: _wait_carried(sock, policy.idle_timeout_s),
                )
            except ssl.SSLError as exc:
                self.close()
                raise tls_error(peer, exc, self.ca_note) from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if body.error is not None:
                    raise body.error from None
                if isinstance(exc, TimeoutError):
                    problem = stalled(what, body.sent, size, peer, policy.idle_timeout_s)
                else:
                    problem = broken(what, body.sent, size, peer, str(exc) or type(exc).__name__)
                self._current = (index + 1) % len(self.controllers)
            else:
                if resp.status == 503 and resp.getheader("X-XCE-Not-Primary"):
                    self.close()
                    self._current = (index + 1) % len(self.controllers)
                    problem = f"{what}: {peer} is not the primary"
                    wait = 0.0
                else:
                    try:
                        return _decode(resp, data)
                    except ApiError as exc:
                        if digest is None and refuses_trailing(exc):
                            self._digest_first = True  # an older controller: not a try
                            digest = hash_fd(fd, size, hashing)
                            # It answered before reading the body: the connection holds
                            # what was sent of it, so the next try opens a new one.
                            self.close()
                            continue
                        if is_final(exc):
                            raise
                        if exc.code == "busy":
                            after = resp.getheader("Retry-After")
                            wait = retry_after(after, policy.max_busy_wait_s)
                        elif exc.code == "digest_mismatch" and digest is not None:
                            digest = hash_fd(fd, size)  # the file may have changed meanwhile
                        problem = broken(what, body.sent, size, peer, exc.message)
            tries += 1
            if tries >= policy.attempts:
                raise ApiError(0, "transfer_failed", gave_up(problem, tries))
            time.sleep(wait)

    def delete_upload(self, upload_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/api/v1/uploads/{upload_id}")

    def hosts(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/hosts")["hosts"]

    def host(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/hosts/{quote(name)}")

    def queues(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/queues")["queues"]


def _wait_carried(sock: Any, idle_s: float) -> None:
    """Wait until the peer has acknowledged every byte of a body handed to `sock`, or its
    answer has begun: on a slow link the kernel's buffer may take longer than the idle
    timeout to empty, and that is progress. TimeoutError once nothing more is
    acknowledged for `idle_s`."""
    left = unsent_bytes(sock)
    moved_at = time.monotonic()
    while left:
        readable, _, _ = select.select([sock], [], [], DRAIN_POLL_S)
        if readable:
            return  # an answer (an early refusal, say) is waiting: read it
        now = unsent_bytes(sock)
        if now is not None and now < left:
            moved_at = time.monotonic()
        elif time.monotonic() - moved_at > idle_s:
            raise TimeoutError(f"the peer acknowledged nothing more for {idle_s:g} s")
        left = now


_hashing_thread: Any = None  # one thread hashes the blocks of uploads as they are sent


def _hashing() -> Any:
    global _hashing_thread
    if _hashing_thread is None:
        from concurrent.futures import ThreadPoolExecutor  # here: few commands send files

        _hashing_thread = ThreadPoolExecutor(1, thread_name_prefix="xce-hash")
    return _hashing_thread


class _FileBody:
    """A file sent as a request's body (`seek(0)` before each try, then `send_to`): read
    with pread in blocks of `CHUNK_BYTES`, never past `size`, counting what was handed
    over. `trailing`: each block is hashed in a thread of its own while it is sent (hashlib
    lets go of the GIL, so the hash and the socket's copy run side by side; at most two
    blocks are held), and the 64 hex digits of the file's SHA-256 follow its last byte
    (`X-XCE-SHA256: trailing`).

    Over a plain socket a block goes out in as few `send` calls as the socket's buffer
    allows, each waiting for room up to the idle timeout; over TLS in views of at most
    `SEND_PIECE` (`read`), each `sendall` bounded by that timeout. The plain path spares
    the CLI about 0.1 s of CPU per GiB (7 %) against 64 KiB `sendall` calls."""

    def __init__(
        self, fd: int, size: int, progress: Progress | None, trailing: bool = False
    ) -> None:
        self.fd, self.size, self.progress, self.trailing = fd, size, progress, trailing
        self.sent = 0
        self.error: OSError | None = None  # reading the file failed: final, not a retry
        self.hasher: Any = None
        self.ended = False  # the digest is handed over
        self._block = memoryview(b"")  # the block being sent, from byte `_start` of the file
        self._start = 0
        self._hashed: Any = None  # the future of the last block's hash
        self.seek(0)

    def seek(self, offset: int) -> int:
        import hashlib  # here: every one-shot command loads this module, few of them send

        if offset != 0:
            raise OSError("a file body is sent again from its start only")
        self._wait_hash()
        self.sent, self.hasher, self.ended = 0, hashlib.sha256(), False
        self._block, self._start = memoryview(b""), 0
        return offset

    def _wait_hash(self) -> None:
        if self._hashed is not None:
            hashed, self._hashed = self._hashed, None
            hashed.result()

    def _next_block(self) -> None:
        try:
            block = os.pread(self.fd, min(CHUNK_BYTES, self.size - self.sent), self.sent)
            if not block:
                raise OSError(f"the file shrank to {self.sent} bytes while it was sent")
        except OSError as exc:
            self.error = exc
            raise
        self._block, self._start = memoryview(block), self.sent
        if self.trailing:
            self._wait_hash()  # in order, and never more than one block behind
            self._hashed = _hashing().submit(self.hasher.update, block)

    def send_to(self, sock: Any) -> None:
        """Send the body over `sock`, a block at a time in as few calls as the socket's
        buffer allows (its timeout bounds each wait for room: an idle clock, never one on
        the whole body)."""
        if isinstance(sock, ssl.SSLSocket):
            while piece := self.read():
                sock.sendall(piece)
            return
        while self.sent < self.size:
            at = self.sent - self._start
            if at >= len(self._block):
                self._next_block()
                at = 0
            view = self._block[at:]
            while view:
                n = sock.send(view)  # waits for room up to the timeout, sends what fits
                view = view[n:]
                self.sent += n
                if self.progress is not None:
                    self.progress(self.sent, self.size)
        if self.trailing:
            self.ended = True
            self._wait_hash()
            sock.sendall(self.hasher.hexdigest().encode())

    def read(self, n: int = CHUNK_BYTES) -> bytes | memoryview:
        # at most SEND_PIECE: each sendall (TLS) must finish within the idle timeout
        want = min(n if n > 0 else SEND_PIECE, SEND_PIECE, self.size - self.sent)
        if want <= 0:
            if not self.trailing or self.ended:
                return b""
            self.ended = True
            self._wait_hash()
            return self.hasher.hexdigest().encode()
        at = self.sent - self._start
        if at >= len(self._block):
            self._next_block()
            at = 0
        piece = self._block[at : at + want]
        self.sent += len(piece)
        if self.progress is not None:
            self.progress(self.sent, self.size)
        return piece


def _decode(resp: http.client.HTTPResponse, data: bytes) -> Any:
    if resp.status >= 400:
        text = data.decode(errors="replace")
        try:
            err = json.loads(text)["error"]
            raise ApiError(resp.status, err.get("code", "error"), err.get("message", text))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ApiError(resp.status, "http_error", text[:200] or resp.reason or "") from None
    content_type = (resp.getheader("Content-Type") or "").split(";")[0].strip()
    if content_type == "application/json":
        return json.loads(data)
    return data
