"""`WalWriter`: appends events to segment files with group commit.

`append` encodes and buffers synchronously, in apply order. One flusher task writes whatever
is buffered and calls fdatasync once for the whole group; every `sync()` caller whose record
was in that group is released together, so concurrent requests share one fsync and
throughput grows with concurrency.

Policies: `always` (default) releases `sync()` only after the fsync; `interval` releases at
once and fsyncs every `interval_s` — a crash can then lose up to that window of acknowledged
changes, like Redis' `appendfsync everysec`.

A write or fsync error is never retried on the same data (PostgreSQL's fsyncgate): the
writer turns read-only, `check_writable()` raises `Unavailable` (HTTP 503), and a probe
retries every second by cutting the failed segment back to its last durable byte and writing
the unflushed records into a fresh segment. Reads keep working meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from xce.core.errors import Unavailable
from xce.core.events import Event
from xce.store.wal.framing import frame
from xce.store.wal.reader import list_segments, segment_name
from xce.store.wal.segment import header_frame
from xce.telemetry import metrics
from xce.wire.codec import encode_entry
from xce.wire.fast_write import WRITE_REJECTS, encode_entry_fast

log = logging.getLogger("xce.wal")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Segment:
    def __init__(self, path: Path, size: int, preallocate: bool) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.offset = 0
        self.size = size
        try:
            if preallocate:
                os.posix_fallocate(self.fd, 0, size)
        except OSError:
            os.close(self.fd)
            path.unlink(missing_ok=True)
            raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class WalWriter:
    def __init__(
        self,
        wal_dir: Path,
        next_seq: int,
        epoch: int = 0,
        segment_bytes: int = 64 * 1024 * 1024,
        fsync: str = "always",
        interval_s: float = 1.0,
        preallocate: bool = True,
    ) -> None:
        if fsync not in ("always", "interval"):
            raise ValueError(f"fsync policy must be always or interval, not {fsync!r}")
        self.dir = wal_dir
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.next_seq = next_seq
        self.epoch = epoch
        self.segment_bytes = segment_bytes
        self.policy = fsync
        self.interval_s = interval_s
        self.preallocate = preallocate
        self.durable_seq = next_seq - 1
        self._header = header_frame()  # each new segment's first frame (format, release)
        self._buffer: list[tuple[int, bytes]] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._segment: _Segment | None = None
        self._flusher: asyncio.Task[None] | None = None
        # Set when a caller waits for the disk (a durable sync, `close`): an interval flusher
        # writes what waits now, not at the interval's end.
        self._wake = asyncio.Event()
        self._closing = False
        self._failed: OSError | None = None
        self._probe: asyncio.Task[None] | None = None
        # Replication (xce/ha/source.py) is handed each group once it is durable here.
        self.on_durable: Callable[[list[tuple[int, bytes]]], None] | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xce-wal")
        self.stats = {
            "fsyncs": 0,
            "records": 0,
            "bytes": 0,
            "last_group": 0,
            "max_group": 0,
            "fsync_seconds": 0.0,
        }

    # --- the EventLog protocol --------------------------------------------------------

    def check_writable(self) -> None:
        if self._failed is not None:
            raise Unavailable(
                f"the controller cannot write its log ({self._failed.strerror or self._failed});"
                " it refuses changes until the disk recovers, reads still work"
            )

    def prepare(self, event: Event, offset: int = 0) -> bytes:
        """The framed record for `event` as the record `offset` places after the next one
        (a batch is encoded whole before any of it applies); raises `WireError`."""
        seq = self.next_seq + offset
        try:  # the builder's bytes without pycapnp (xce/wire/fast_write.py), ~2x cheaper
            return frame(encode_entry_fast(seq, self.epoch, event))
        except WRITE_REJECTS:  # a shape it leaves to the reference, which also owns errors
            return frame(encode_entry(seq, self.epoch, event))

    def append(self, prepared: bytes | Event) -> int:
        """Buffer a record from `prepare` (or encode an event directly, for tools/tests)."""
        if isinstance(prepared, Event):
            prepared = self.prepare(prepared)
        seq = self.next_seq
        self._buffer.append((seq, prepared))
        self.next_seq += 1
        return seq

    async def sync(self, durable: bool = False) -> None:
        """Wait until everything appended so far is on disk (always, or when `durable`)."""
        target = self.next_seq - 1
        if target <= self.durable_seq:
            return
        self.check_writable()
        if self.policy == "interval" and not durable:
            self._ensure_flusher()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, fut))
        self._wake.set()
        self._ensure_flusher()
        await fut

    # --- flushing ---------------------------------------------------------------------

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._buffer and self._failed is None:
            if self.policy == "interval" and not self._waiters and not self._closing:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
            batch, self._buffer = self._buffer, []
            try:
                seconds = await loop.run_in_executor(self._io, self._write_batch, batch)
            except OSError as exc:
                self._buffer = batch + self._buffer
                self._fail(exc)
                return
            self.durable_seq = batch[-1][0]
            self.stats["fsyncs"] += 1
            self.stats["records"] += len(batch)
            self.stats["last_group"] = len(batch)
            self.stats["max_group"] = max(self.stats["max_group"], len(batch))
            self.stats["fsync_seconds"] += seconds
            metrics.WAL_FSYNC.observe(seconds)
            metrics.WAL_GROUP.observe(len(batch))
            if self.on_durable is not None:
                self.on_durable(batch)
            self._release()

    def _release(self) -> None:
        keep = []
        for seq, fut in self._waiters:
            if seq <= self.durable_seq:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self._waiters = keep

    def _write_batch(self, batch: list[tuple[int, bytes]]) -> float:
        """Runs in the WAL thread: write one group, roll segments as needed, fdatasync."""
        data = b"".join(b for _, b in batch)
        started = time.perf_counter()
        seg = self._segment
        if seg is None or (seg.offset > 0 and seg.offset + len(data) > seg.size):
            self._roll(batch[0][0], len(data) + len(self._header))
            seg = self._segment
        assert seg is not None
        if seg.offset == 0:
            # The header goes down with the first records, in one write: a segment holds
            # either nothing, or a header and records (a crash tearing both is a torn tail).
            data = self._header + data
        written = 0
        while written < len(data):
            written += os.pwrite(seg.fd, data[written:], seg.offset + written)
        os.fdatasync(seg.fd)
        seg.offset += len(data)
        self.stats["bytes"] += len(data)
        return time.perf_counter() - started

    def _roll(self, first_seq: int, need: int) -> None:
        old = self._segment
        if old is not None:
            os.fdatasync(old.fd)
            old.close()
            self._segment = None  # closed: a failed roll must not leave a dead fd behind
        size = max(self.segment_bytes, need)
        self._segment = _Segment(self.dir / segment_name(first_seq), size, self.preallocate)
        fsync_dir(self.dir)

    # --- failure and recovery ---------------------------------------------------------

    def _fail(self, exc: OSError) -> None:
        log.error("WAL write failed (%s): refusing writes until the disk recovers", exc)
        self._failed = exc
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(
                    Unavailable(
                        f"the change could not be made durable yet ({exc.strerror or exc}): it "
                        "may still be written when the disk recovers, so check before retrying"
                    )
                )
        self._waiters = []
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._recover_loop())

    async def _recover_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._failed is not None:
            await asyncio.sleep(1.0)
            try:
                await loop.run_in_executor(self._io, self._reopen)
            except OSError as exc:
                log.info("WAL still not writable: %s", exc)
                continue
            log.warning("WAL writable again: accepting changes")
            self._failed = None
            self._ensure_flusher()

    def _reopen(self) -> None:
        """Cut the failed segment at its durable end; the unflushed records go to a new one."""
        seg = self._segment
        if seg is not None:
            if seg.offset == 0:
                # Nothing durable in it: remove it, or its name would clash with the new one.
                seg.close()
                seg.path.unlink(missing_ok=True)
                fsync_dir(self.dir)
            else:
                os.ftruncate(seg.fd, seg.offset)
                os.fsync(seg.fd)
                seg.close()
            self._segment = None
        if self._buffer:
            self._roll(self._buffer[0][0], sum(len(b) for _, b in self._buffer))

    @property
    def failed(self) -> bool:
        return self._failed is not None

    def segments_before(self, seq: int) -> list[Path]:
        """Segments every record of which has a sequence number below `seq`."""
        segs = list_segments(self.dir)
        current = self._segment.path if self._segment else None
        out = []
        for (_first, path), (next_first, _) in itertools.pairwise(segs):
            if next_first <= seq and path != current:
                out.append(path)
        return out

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._flusher is not None and not self._flusher.done():
            with contextlib.suppress(Exception):
                await self._flusher
        if self._probe is not None:
            self._probe.cancel()
        if self._segment is not None:
            self._segment.close()
            self._segment = None
        self._io.shutdown(wait=True)
