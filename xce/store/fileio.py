"""The file store's own threads, and descriptors that are closed only once no thread uses them.

File bodies are written, read and hashed off the event loop, in a pool of the store's own:
the loop keeps answering heartbeats and finish reports while a disk is slow, and a stalled
disk holds these threads only, never the default executor that the WAL's neighbours, the
audit log and the replication link share.

A request can be cancelled (its client went away) while a thread is still writing to or
reading from its descriptor. Closing the descriptor then would let the kernel hand its
number to the next `open`, and the thread would write into someone else's file: a `Handle`
closes its descriptor (and removes its temporary file) only after its last call returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class Threads:
    """A small pool for the store's file I/O."""

    def __init__(self, workers: int = 8) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xce-files")

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self.pool.submit(fn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self.pool.submit(fn, *args))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class Handle:
    """An open descriptor used from the store's threads."""

    def __init__(self, threads: Threads, fd: int, tmp: Path | None = None) -> None:
        self.threads = threads
        self.fd = fd
        self.tmp = tmp  # removed on close unless `keep` was called (a write's temp file)
        self._last: Future[Any] | None = None
        self._closed = False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(fd, *args)` in a store thread."""
        future = self.threads.submit(fn, self.fd, *args)
        self._last = future
        return await asyncio.wrap_future(future)

    def waits_for(self, future: Future[Any]) -> None:
        """Work outside `call` uses the descriptor until `future` is done: `close` waits
        for it (the last such, or the last call, whichever came later)."""
        self._last = future

    def keep(self) -> None:
        """The temporary file was renamed into place: closing must not remove it."""
        self.tmp = None

    def close(self) -> None:
        """Close the descriptor (and remove the temp file) once no call is running."""
        if self._closed:
            return
        self._closed = True
        fd, tmp = self.fd, self.tmp

        def done(_: object = None) -> None:
            with contextlib.suppress(OSError):
                os.close(fd)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()

        last = self._last
        if last is None or last.done():
            done()
        else:
            last.add_done_callback(done)  # runs at once if it finished meanwhile
