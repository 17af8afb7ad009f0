"""`DurableLog`: the controller's `EventLog` on local disk (WAL + checkpoints).

It owns the WAL writer and the checkpoint schedule: every `checkpoint_every` records or
`checkpoint_interval_s` seconds (whichever comes first, and only if something changed), and
once more on clean shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from xce.core.applier import Applier, Observer
from xce.core.errors import XceError
from xce.core.events import Event
from xce.core.state import ClusterState
from xce.store.checkpoint import copy_state, list_checkpoints, write_checkpoint
from xce.store.recovery import Recovered, checkpoint_dir, recover, wal_dir
from xce.store.wal.writer import WalWriter
from xce.telemetry import metrics

log = logging.getLogger("xce.store")


@dataclass(frozen=True)
class StoreSettings:
    fsync: str = "always"
    fsync_interval_s: float = 1.0
    segment_bytes: int = 64 * 1024 * 1024
    checkpoint_every: int = 100_000
    checkpoint_interval_s: float = 300.0
    finished_retention_s: float = 3600.0
    # The observers (xce/core/applier.py: the accounting feed, xce/accounting/feed.py) that
    # recovery and a standby's replay feed, as the service does live. Not a setting: they
    # travel with them because every place that opens this controller's log gets them.
    observers: tuple[Observer, ...] = ()


class DurableLog:
    def __init__(self, state_dir: Path, settings: StoreSettings, recovered: Recovered) -> None:
        self.state_dir = state_dir
        self.settings = settings
        self.recovered = recovered
        # Applies replicated events to the recovered state with the same observers (a
        # standby's follower, xce/ha/follower.py)
        self.applier = Applier(recovered.state, settings.observers)
        self.writer = WalWriter(
            wal_dir(state_dir),
            recovered.last_seq + 1,
            segment_bytes=settings.segment_bytes,
            fsync=settings.fsync,
            interval_s=settings.fsync_interval_s,
        )
        self.checkpoint_seq = recovered.checkpoint_seq
        self.last_epoch = recovered.last_epoch  # of the last record: checkpoints carry it
        self.last_checkpoint = time.monotonic()
        self.stats = {"checkpoints": 0, "last_checkpoint_s": 0.0, "last_pause_ms": 0.0, "purged": 0}
        self._checkpointing = asyncio.Lock()
        # HA sync mode (xce/ha/source.py): a commit also waits for a standby's ack.
        self.replicated: Callable[[int, bool], Awaitable[None]] | None = None
        # HA fencing (xce/ha/node.py): raises NotPrimary when this node may not write.
        self.fence: Callable[[], None] | None = None
        # Retention on a primary (`ControllerService.purge_finished`, set by run_primary):
        # commits a JobsPurged event before each checkpoint. None on a standby, which drops
        # jobs only when it replays the primary's event.
        self.purge: Callable[[float], Awaitable[int]] | None = None
        self.wanted = asyncio.Event()

    @classmethod
    def open(cls, state_dir: Path, settings: StoreSettings) -> DurableLog:
        recovered = recover(state_dir, observers=settings.observers)
        log.info(
            "recovered %d jobs, %d arrays: checkpoint at record %d, %d records replayed in %.2fs",
            len(recovered.state.jobs),
            len(recovered.state.arrays),
            recovered.checkpoint_seq,
            recovered.replayed,
            recovered.seconds,
        )
        return cls(state_dir, settings, recovered)

    # --- EventLog ---------------------------------------------------------------------

    def check_writable(self) -> None:
        if self.fence is not None:
            self.fence()
        self.writer.check_writable()

    def prepare(self, event: Event, offset: int = 0) -> bytes:
        return self.writer.prepare(event, offset)

    def append(self, prepared: bytes | Event, epoch: int | None = None) -> None:
        """Append a record; `epoch` is the term that wrote it (a standby's copies keep the
        primary's), by default this writer's own."""
        self.writer.append(prepared)
        self.last_epoch = self.writer.epoch if epoch is None else epoch
        if self.writer.next_seq - 1 - self.checkpoint_seq >= self.settings.checkpoint_every:
            self.wanted.set()

    async def sync(self, durable: bool = False) -> None:
        target = self.writer.next_seq - 1
        await self.writer.sync(durable)
        if self.replicated is not None:
            await self.replicated(target, False)

    async def sync_replicated(self) -> None:
        """Durable here and on a standby, whatever the replication mode (a job number
        reservation must reach a standby before its numbers are used)."""
        target = self.writer.next_seq - 1
        await self.writer.sync(durable=True)
        if self.replicated is not None:
            await self.replicated(target, True)

    # --- checkpoints ------------------------------------------------------------------

    async def checkpoint(self, state: ClusterState, now: float | None = None) -> Path | None:
        """Purge finished jobs past retention (a primary), snapshot, write off-loop, prune
        the WAL."""
        async with self._checkpointing:
            if self.writer.failed:
                return None  # never let a checkpoint get ahead of a log that cannot write
            purged = 0
            if self.purge is not None:
                cutoff = (
                    now if now is not None else time.time()
                ) - self.settings.finished_retention_s
                try:
                    purged = await self.purge(cutoff)
                except XceError as exc:  # fenced or the log failed: the checkpoint still helps
                    log.warning("retention purge not written (%s)", exc.message)
                if self.writer.failed:
                    return None
            seq = self.writer.next_seq - 1
            started = time.perf_counter()
            if (
                not purged
                and seq == self.checkpoint_seq
                and list_checkpoints(checkpoint_dir(self.state_dir))
            ):
                return None
            copy = copy_state(state, seq, self.last_epoch)
            self.stats["last_pause_ms"] = (time.perf_counter() - started) * 1000
            # Publish only a checkpoint whose every record is already in the WAL: otherwise
            # a crash could leave a checkpoint past the log's end and a gap after it.
            await self.writer.sync(durable=True)
            loop = asyncio.get_running_loop()
            path = await loop.run_in_executor(
                None, write_checkpoint, checkpoint_dir(self.state_dir), copy
            )
            self.checkpoint_seq = seq
            self.last_checkpoint = time.monotonic()
            kept = list_checkpoints(checkpoint_dir(self.state_dir))
            oldest_kept = kept[-1][0] if kept else seq
            for segment in self.writer.segments_before(oldest_kept + 1):
                segment.unlink(missing_ok=True)
            self.stats["checkpoints"] += 1
            self.stats["purged"] += purged
            self.stats["last_checkpoint_s"] = time.perf_counter() - started
            metrics.CHECKPOINT.observe(self.stats["last_checkpoint_s"])
            metrics.CHECKPOINT_PAUSE.observe(self.stats["last_pause_ms"] / 1000)
            log.info(
                "checkpoint at record %d: %d jobs, %d purged, %.2fs (loop pause %.1f ms)",
                seq,
                len(copy.jobs),
                purged,
                self.stats["last_checkpoint_s"],
                self.stats["last_pause_ms"],
            )
            return path

    async def run_checkpoints(self, state: ClusterState) -> None:
        if self.recovered.replayed:
            # A start after a crash (no shutdown checkpoint) replayed records: checkpoint at
            # once, so that the segments before the older kept checkpoint are dropped by the
            # usual rule (a standby behind them gets a checkpoint transfer). Without it,
            # every start of a crash loop opened a new preallocated segment and none was
            # ever dropped: the WAL grew by a segment per crash.
            self.wanted.set()
        while True:
            # Not wait_for: on Python 3.11 it swallows a cancellation that arrives as
            # `wanted` is set, and the stop would wait for this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.checkpoint_interval_s):
                    await self.wanted.wait()
            self.wanted.clear()
            try:
                await self.checkpoint(state)
            except (OSError, XceError) as exc:  # a WAL failure (Unavailable) included
                log.error("checkpoint failed (%s); will try again", exc)
                await asyncio.sleep(5)

    async def close(self, state: ClusterState) -> None:
        try:
            if not self.writer.failed:
                await self.writer.sync(durable=True)
                await self.checkpoint(state)
        finally:
            await self.writer.close()
