"""Standbys' acknowledgements, and sync mode: a commit waits for one in-sync standby.

Acks give the lag, release the commits (and file operations) waiting in sync mode, and count
as contact for the primary's write lease. A commit that no standby acknowledges within
`sync_timeout_s` degrades the source to async, with a logged alert.
"""

from __future__ import annotations

import asyncio
import logging
import time

from xce.core.errors import XceError
from xce.ha import protocol
from xce.ha.sessions import SourceShared, StandbySession, stepped_down
from xce.ha.shipping import FileShipping
from xce.telemetry import metrics

log = logging.getLogger("xce.ha.source")


class Acknowledgements:
    """Reading each standby's acks; waiting for them in sync mode. File acks and the files
    a standby returns go to `files`."""

    def __init__(self, shared: SourceShared, files: FileShipping) -> None:
        self.shared = shared
        self.files = files
        self._ack_waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def read_acks(self, reader: asyncio.StreamReader, session: StandbySession) -> None:
        try:
            while True:
                msg = await protocol.read_message(reader)
                if msg.epoch > self.shared.epochs.epoch:
                    self.shared.on_higher_epoch(msg.epoch)
                    raise XceError(f"standby {session.node} knows a newer epoch {msg.epoch}")
                if msg.kind == "fileAck":
                    session.acked_ticket = max(session.acked_ticket, msg.body["ticket"])
                    self.files.release_files()
                    continue
                if msg.kind == "fileData":
                    await self.files.take_back(session, msg.body)
                    continue
                if msg.kind == "fileWant":
                    self.files.on_want(session, [str(n) for n in msg.body["names"]])
                    continue
                if msg.kind != "ack":
                    raise protocol.ProtocolError(f"expected ack, got {msg.kind}")
                session.acked_seq = max(session.acked_seq, msg.body["durableSeq"])
                session.last_ack = time.monotonic()
                if not session.in_sync and session.acked_seq >= self.shared.durable_seq:
                    session.in_sync = True
                    if self.shared.degraded:
                        self.shared.degraded = False
                        log.warning(
                            "%s replication restored: standby %s is caught up",
                            self.shared.mode,
                            session.node,
                        )
                metrics.REPLICATION_LAG.labels(session.node).set(
                    max(self.shared.durable_seq - session.acked_seq, 0)
                )
                self._release_acks()
                self.files.release_files()
        except (EOFError, ConnectionError, protocol.ProtocolError, XceError) as exc:
            log.info("replication acks from %s ended: %s", session.node, exc)
            if session.writer is not None:
                session.writer.close()

    async def _bounded(self, seq: int) -> None:
        """Async mode: return once acknowledging `seq` keeps within the lag bound
        (lagbound.py), waiting for a standby if need be; lift the bound with an alert
        when none confirms within `sync_timeout_s` (or none is caught up)."""
        bound = self.shared.bound
        if bound is None or not bound.enabled or self.shared.degraded:
            return
        held = [s.acked_seq for s in self.shared.sessions.values() if s.in_sync]
        if not held:
            self.shared.degrade("no standby is connected and caught up")
            return
        target = bound.needed(seq, max(held))
        if target <= max(held):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ack_waiters.append((target, fut))
        self._release_acks()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.shared.sync_timeout_s)
        except TimeoutError:
            self._ack_waiters = [(q, f) for q, f in self._ack_waiters if f is not fut]
            fut.cancel()
            for s in self.shared.sessions.values():
                if s.acked_seq < target:
                    s.in_sync = False
            self.shared.degrade(
                f"no standby acknowledged record {target} within {self.shared.sync_timeout_s:g} s"
            )

    def _release_acks(self) -> None:
        best = max((s.acked_seq for s in self.shared.sessions.values() if s.in_sync), default=0)
        keep = []
        for seq, fut in self._ack_waiters:
            if seq <= best:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self._ack_waiters = keep

    def fail_waiters(self) -> None:
        """The source is closing: no commit still waited for is confirmed."""
        for _, fut in self._ack_waiters:
            if not fut.done():  # never acknowledge what no standby confirmed
                fut.set_exception(stepped_down())
        self._ack_waiters = []

    async def wait_replicated(self, seq: int, force: bool = False) -> None:
        """Sync mode (or `force`, in any mode: job number reservations): return once an
        in-sync standby holds `seq` durably, or degrade (async mode: warn) after
        `sync_timeout_s`."""
        if self.shared.mode != "sync" and not force:
            await self._bounded(seq)
            return
        sync = self.shared.mode == "sync"
        if not any(s.in_sync for s in self.shared.sessions.values()):
            if sync:
                self.shared.degrade("no standby is connected and caught up")
            else:
                log.warning(
                    "record %d (job numbers) is not on any standby: no standby is "
                    "connected and caught up",
                    seq,
                )
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ack_waiters.append((seq, fut))
        self._release_acks()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.shared.sync_timeout_s)
        except TimeoutError:
            self._ack_waiters = [(q, f) for q, f in self._ack_waiters if f is not fut]
            fut.cancel()
            for s in self.shared.sessions.values():
                if s.acked_seq < seq:
                    s.in_sync = False
            why = f"no standby acknowledged record {seq} within {self.shared.sync_timeout_s:g} s"
            if sync:
                self.shared.degrade(why)
            else:
                log.warning("%s (job numbers)", why)
