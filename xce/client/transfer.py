"""What every file transfer through the API shares: the rules, the digests, the messages.

Sites without shared storage move every job input and output through the controller, so a
transfer may be gigabytes over a slow link. The rules both clients (`XceClient` for the CLI's
downloads and the worker, `LightClient` for `xce job submit`'s uploads) follow:

* a body is streamed in chunks of `CHUNK_BYTES`, never held whole, so memory does not grow
  with the file;
* no clock covers a whole body: a transfer fails only when no byte moves for
  `idle_timeout_s` (client.toml `transfer_idle_timeout_s`, `XCE_TRANSFER_IDLE_TIMEOUT_S`,
  the worker's `[worker] transfer_idle_timeout_s`), with one line naming the file, the bytes
  moved and the peer;
* an interrupted transfer is tried again a bounded number of times with doubling waits (a
  download resumes from the byte it holds with `Range`); a `503 busy` answer is retried
  after its `Retry-After`; `413 too_large` is final;
* every file is checked against its SHA-256 (`X-XCE-SHA256`): a download hashes while it
  streams and keeps nothing that does not match; an upload hashes the file first (the
  header must go before the body) and then streams it;
* an upload's body counts as sent only once the peer has acknowledged all of it
  (`unsent_bytes`): the kernel may hold megabytes of it after the last write, which a slow
  link takes longer than the idle timeout to carry, and that wait for the answer is progress,
  not a stall.

No aiohttp here: the light client imports this module too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
import termios
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xce.client.errors import ApiError
from xce.protocol.files import DIGEST_BYTES as DIGEST_BYTES
from xce.protocol.files import DIGEST_HEADER as DIGEST_HEADER
from xce.protocol.files import TRAILING as TRAILING

# One read, write or hash step. Big enough that a 4 GiB file is a few thousand steps, small
# enough that a handful in flight (socket buffers, the worker's write queue) stays a few MiB.
CHUNK_BYTES = 1 << 20
# What an upload hands the socket at a time: the idle clock is pushed back after each, so
# a link slower than CHUNK_BYTES per idle timeout is still seen to move.
SEND_PIECE = 64 << 10
DEFAULT_IDLE_TIMEOUT_S = 60.0
IDLE_TIMEOUT_ENV = "XCE_TRANSFER_IDLE_TIMEOUT_S"
# How often an upload whose last byte is handed over looks at what its peer has not
# acknowledged yet (`unsent_bytes`): the idle clock is pushed back while that shrinks.
DRAIN_POLL_S = 0.1
# (bytes done, total bytes or None): called as a transfer moves; the CLI draws progress.
Progress = Callable[[int, int | None], None]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


@dataclass(frozen=True)
class TransferPolicy:
    """How patient a transfer is. Bounded everywhere: `attempts` tries in all (a broken
    connection, a stall, a server error, a busy answer or a digest the server refused each
    use one), waits doubling from `first_wait_s` to `max_wait_s` between them, and a
    server's `Retry-After` honoured up to `max_busy_wait_s`. Connecting is bounded by
    `connect_timeout_s`; after that only idleness is (`idle_timeout_s`)."""

    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    connect_timeout_s: float = 30.0
    attempts: int = 6
    first_wait_s: float = 1.0
    max_wait_s: float = 30.0
    max_busy_wait_s: float = 300.0
    # Transfers one client runs at once (each holds a few MiB of buffers): a worker whose
    # many jobs end together queues their outputs instead of growing with their number.
    concurrent: int = 4

    def wait_s(self, tries: int) -> float:
        """The pause before try number `tries + 1` (after `tries` failed ones)."""
        return float(min(self.max_wait_s, self.first_wait_s * 2 ** max(0, tries - 1)))


def idle_timeout_setting(value: object, where: str) -> float:
    """A configured idle timeout as seconds (> 0); ValueError naming `where` otherwise."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a number of seconds, not {value!r}") from None
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{where} must be a positive number of seconds, not {value!r}")
    return seconds


def digest_of(headers: Mapping[str, str]) -> str | None:
    """The whole file's SHA-256 the server declares, or None (a controller that does not
    send one yet: the download is then not verified). A malformed value is an error, never
    a silently skipped check."""
    value = headers.get(DIGEST_HEADER)
    if value is None:
        return None
    value = value.strip().lower()
    if not _HEX64.match(value):
        raise ApiError(0, "bad_digest", f"malformed {DIGEST_HEADER} from the server: {value!r:.80}")
    return value


def content_range(value: str | None) -> tuple[int, int] | None:
    """(first byte, total size) of a `Content-Range: bytes A-B/SIZE` header, else None."""
    m = _CONTENT_RANGE.match((value or "").strip())
    if not m:
        return None
    first, last, size = (int(g) for g in m.groups())
    if last < first or last >= size:
        return None
    return first, size


def retry_after(value: str | None, cap: float) -> float:
    """A `Retry-After` header's seconds (the delta form), at most `cap`; 1 s when absent or
    in the date form (a busy controller is asked again soon, never hammered)."""
    try:
        seconds = float(value or "1")
    except ValueError:
        seconds = 1.0
    if seconds != seconds:  # NaN
        seconds = 1.0
    return min(max(seconds, 0.0), cap)


# Errors of our own (status 0) that another try may cure: no candidate answered, the body
# ended early, the file must be fetched again from its start, a Range answer that did not fit,
# a transfer that used up its tries (a later pass, e.g. the worker's next, may still succeed).
_AGAIN = frozenset({"unreachable", "short", "restart", "bad_range", "transfer_failed"})


def is_final(exc: ApiError) -> bool:
    """Whether an error ends a transfer at once: a client error (too large, forbidden,
    gone...), except the ones that say "try again" (408, 429) and a refused digest (the
    bytes were damaged on the way, or the file changed while it was read: hash and send
    again); and our own errors but those in `_AGAIN` (a TLS refusal, a file that changed
    under a pipe, a malformed header...). Server errors (5xx) are tried again."""
    if exc.status == 0:
        return exc.code not in _AGAIN
    if exc.code == "digest_mismatch":
        return False
    return 400 <= exc.status < 500 and exc.status not in (408, 429)


def refuses_trailing(exc: ApiError) -> bool:
    """Whether a controller from before the trailing digest refused it: it answers 400 to
    `X-XCE-SHA256: trailing` before it reads the body, with a message that names the
    header and not the trailing form (a newer controller's refusals name it). The sender
    then hashes first and declares the digest before the body, as it did before."""
    # The older message ends there; a newer one goes on with "or 'trailing'". Matched at
    # the end, as the message starts with the file's name, which may hold any word.
    return exc.status == 400 and exc.message.endswith(
        f"{DIGEST_HEADER} must be the 64 hex digits of the body's SHA-256"
    )


def hash_fd(fd: int, size: int, progress: Progress | None = None) -> str:
    """The SHA-256 of the first `size` bytes behind `fd`, read with pread in chunks (the
    descriptor's offset is left alone: stdout and stderr are shared with the live tail).
    OSError when the file is shorter than `size` now."""
    import hashlib  # here: every one-shot command loads this module, few of them hash

    digest = hashlib.sha256()
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(CHUNK_BYTES, size - offset), offset)
        if not chunk:
            raise OSError(f"the file shrank to {offset} bytes while it was read")
        digest.update(chunk)
        offset += len(chunk)
        if progress is not None:
            progress(offset, size)
    return digest.hexdigest()


def unsent_bytes(sock: Any) -> int | None:
    """Bytes written to `sock` that its peer has not acknowledged yet (Linux TIOCOUTQ: sent
    and unacknowledged, or not sent yet); None where that cannot be known (a closed socket,
    another system)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sock.fileno()
        if fd >= 0:
            raw = fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0")
            return int(struct.unpack("i", raw)[0])
    return None


def stalled(what: str, moved: int, total: int | None, peer: str, idle_s: float) -> str:
    """The one line of a transfer that stopped moving."""
    return f"{what}: no data for {idle_s:g} s after {_of(moved, total)} ({peer})"


def broken(what: str, moved: int, total: int | None, peer: str, why: str) -> str:
    """The one line of a transfer that failed for another reason (`why`)."""
    return f"{what}: {why} after {_of(moved, total)} ({peer})"


def mismatch(what: str, moved: int, peer: str, kept: str) -> ApiError:
    """A received file whose SHA-256 is not the one the server declared."""
    return ApiError(
        0,
        "digest_mismatch",
        f"{what}: the {moved} bytes received from {peer} do not match the SHA-256 the "
        f"server declared: {kept}",
    )


def gave_up(message: str, tries: int) -> str:
    return f"{message}; gave up after {tries} {'try' if tries == 1 else 'tries'}"


def _of(moved: int, total: int | None) -> str:
    return f"{moved} of {total} bytes" if total is not None else f"{moved} bytes"
