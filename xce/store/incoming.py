"""One file body streamed into the store: written and hashed as it arrives, never held whole.

The body's chunks are gathered into batches of about 1 MiB; each batch is written to a
temporary file by one thread and fed to the SHA-256 by another, side by side and in order
(two `Lane`s, xce/store/lane.py, fed a few batches ahead): one pass over the bytes, no
second read to hash them, and the event loop only moves bytes from the socket. Each chunk
is counted as it arrives (`count`: the limits see the new total), so a body of unknown
length stops at the first chunk past one; the temporary file is renamed into place only
once the whole body is in and matches the digest its sender declared (before the body, or
after it: `expect` is then asked once the chunks have ended), so a refused, cut or
corrupted body leaves nothing behind. A body of less than one batch is written and hashed
in one of the store's threads (xce/store/fileio.py), with no lane to start.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from xce.core.errors import DigestMismatch, Unavailable
from xce.store import digests
from xce.store.fileio import Handle, Threads
from xce.store.lane import Lane

BATCH = 1 << 20
DEPTH = 3  # batches queued to each lane: at most about DEPTH x BATCH held per body
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


@dataclass(frozen=True)
class Stored:
    """A file the store kept: its size and the hex SHA-256 of its content."""

    size: int
    sha256: str


Piece: TypeAlias = bytes | memoryview
# The digest the sender declared: known before the body (str), or only after it (asked once
# the chunks have ended: a digest that trails the body), or none.
Expected: TypeAlias = str | Callable[[], str | None] | None


def _write_all(fd: int, pieces: list[Piece]) -> None:
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]


def _hash_all(digest: hashlib._Hash, pieces: list[Piece]) -> None:
    for piece in pieces:
        digest.update(piece)


def _write_batch(fd: int, digest: hashlib._Hash, pieces: list[Piece]) -> None:
    _hash_all(digest, pieces)
    _write_all(fd, pieces)


def _lanes(fd: int, digest: hashlib._Hash) -> tuple[Lane[list[Piece]], ...]:
    """The writer's lane, then the hasher's: each batch goes to both."""
    return (
        Lane(functools.partial(_write_all, fd), DEPTH, "xce-files-write"),
        Lane(functools.partial(_hash_all, digest), DEPTH, "xce-files-hash"),
    )


async def receive(
    threads: Threads,
    root: Path,
    target: Path,
    chunks: AsyncIterator[Piece],
    count: Callable[[int, int], None],
    name: str,
    expect: Expected = None,
) -> Stored:
    """Store `chunks` at `target` (its parent exists) and record its digest.

    `count(total, chunk)` is called for each chunk with the bytes so far and the chunk's
    size, and raises to refuse the body. `expect` is the hex SHA-256 the sender declared
    (or a function that says it once the body has ended): a body that differs is refused
    (`DigestMismatch`, naming `name`) and nothing is kept."""
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.part"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno in _FULL:
            raise Unavailable(f"cannot store {name}: {exc.strerror}") from None
        raise
    out = Handle(threads, fd, tmp)
    digest = hashlib.sha256()
    size = 0
    lanes: tuple[Lane[list[Piece]], ...] = ()  # started at the first full batch
    try:
        pieces: list[Piece] = []
        held = 0
        async for chunk in chunks:
            if not chunk:
                continue
            size += len(chunk)
            count(size, len(chunk))  # as it arrives: bodies in flight share their limits
            pieces.append(chunk)
            held += len(chunk)
            if held >= BATCH:
                if not lanes:
                    lanes = _lanes(fd, digest)
                    out.waits_for(lanes[0].done)  # the descriptor stays open while it writes
                for lane in lanes:  # written and hashed while the next batches arrive
                    await lane.put(pieces)
                pieces, held = [], 0
        if lanes:
            if pieces:
                for lane in lanes:
                    await lane.put(pieces)
            for lane in lanes:  # the last batch written and hashed side by side too
                await lane.finish()
        elif pieces:
            await out.call(_write_batch, digest, pieces)
        got = digest.hexdigest()
        want = expect() if callable(expect) else expect
        if want is not None and got != want:
            raise DigestMismatch(
                f"{name}: the body's SHA-256 is {got}, not {want} as its sender declared "
                "(X-XCE-SHA256): the file was damaged on the way, and nothing was kept"
            )
        if target.is_dir() and not target.is_symlink():
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(target))
        if target.is_symlink():
            target.unlink()
        os.replace(tmp, target)
        out.keep()
    except OSError as exc:
        if exc.errno in _FULL:
            raise Unavailable(f"cannot store {name}: {exc.strerror}") from None
        raise
    finally:
        try:
            if lanes and not all(lane.done.done() for lane in lanes):
                # A refused or cut body may leave a lane a batch in hand: stop them and
                # wait (one batch, about 1 MiB), so that close removes the temporary file
                # before the refusal is answered, never after. Their own errors are not the
                # one raised.
                for lane in lanes:
                    lane.stop()
                await asyncio.shield(asyncio.gather(*(asyncio.wrap_future(x.done) for x in lanes)))
        finally:
            out.close()  # also when cancelled while waiting: close then waits for the lane
    st = os.stat(target, follow_symlinks=False)
    await threads.run(digests.record, root, target, got, st)
    return Stored(size, got)
