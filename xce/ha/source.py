"""The primary's side of replication: ship every durable WAL record to each standby.

A standby says where its log ends (`hello`); the source either continues from there (the
records are in memory, or still in WAL segments on disk) or, if the standby is new, too far
behind, or holds a tail that diverged from this primary's history, sends the newest
checkpoint first and the WAL after it. Records leave only once they are durable here, in the
exact bytes the WAL holds. Standbys acknowledge what is durable on their disk; those acks
give the lag, feed `sync` mode (a commit waits for one in-sync standby, up to
`sync_timeout_s`, then degrades to async with a logged alert) and count as contact for the
primary's write lease (xce/ha/lease.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xce.core.errors import Conflict, XceError
from xce.core.state import ClusterState
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.acks import Acknowledgements
from xce.ha.backlog import Backlog
from xce.ha.epochs import EpochStore
from xce.ha.greeting import Greeting
from xce.ha.lagbound import LagBound
from xce.ha.sessions import SourceShared, StandbySession
from xce.ha.shipping import FileShipping
from xce.store import replicated_names
from xce.store.durable import DurableLog
from xce.telemetry import metrics

__all__ = ["ReplicationSource"]

log = logging.getLogger("xce.ha.source")


@dataclass
class _Watched:
    """What a link last sent of the files it re-checks while idle: the key files, and the
    users file's (mtime, size)."""

    files: list[tuple[str, bytes]]
    checked: float
    users: tuple[int, int] | None


class ReplicationSource:
    """The replication listener of a primary: one link per standby. Its parts, each given
    what it needs: `shared` (sessions.py: the sessions, settings, sync mode's alert),
    `backlog` (backlog.py: records from memory or WAL segments), `files` (shipping.py: files
    beside the records), `acks` (acks.py: acknowledgements, sync mode's waits) and
    `greeting` (greeting.py: a standby connecting, its catch-up or checkpoint). The WAL
    writer hands it every durable group (`on_durable`)."""

    def __init__(
        self,
        store: DurableLog,
        epochs: EpochStore,
        auth_dir: Path,
        verify_token: Callable[[str], None],
        state: ClusterState,
        mode: str = "async",
        sync_timeout_s: float = 2.0,
        heartbeat_s: float = 0.5,
        on_higher_epoch: Callable[[int], None] = lambda epoch: None,
        space: hafiles.FileSpace | None = None,
        bound: LagBound | None = None,
    ) -> None:
        self.shared = SourceShared(
            store,
            epochs,
            state,
            mode,
            sync_timeout_s,
            heartbeat_s,
            on_higher_epoch,
            space,
            bound if mode == "async" else None,
        )
        self.backlog = Backlog(store)
        self.files = FileShipping(self.shared)
        self.acks = Acknowledgements(self.shared, self.files)
        self.greeting = Greeting(self.shared, self.backlog, self.files, auth_dir, verify_token)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.handing_to: str | None = None  # a switchover's chosen target (`hand_over`)
        store.writer.on_durable = self.on_durable

    # --- what other packages read and call ----------------------------------------------

    @property
    def store(self) -> DurableLog:
        return self.shared.store

    @property
    def epochs(self) -> EpochStore:
        return self.shared.epochs

    @property
    def mode(self) -> str:
        return self.shared.mode

    @property
    def sync_timeout_s(self) -> float:
        return self.shared.sync_timeout_s

    @property
    def heartbeat_s(self) -> float:
        return self.shared.heartbeat_s

    @property
    def sessions(self) -> dict[str, StandbySession]:
        return self.shared.sessions

    @property
    def degraded(self) -> bool:
        return self.shared.degraded

    @property
    def space(self) -> hafiles.FileSpace | None:
        return self.shared.space

    @space.setter
    def space(self, space: hafiles.FileSpace | None) -> None:
        self.shared.space = space

    @property
    def durable_seq(self) -> int:
        return self.shared.durable_seq

    def on_durable(self, batch: list[tuple[int, bytes]]) -> None:
        """Called by the WAL writer with each group once it is on disk."""
        self.backlog.add(batch)
        if self.shared.bound is not None and batch:
            self.shared.bound.durable(batch[-1][0])
        self.shared.wake_all()

    async def wait_replicated(self, seq: int, force: bool = False) -> None:
        """Sync mode (or `force`): return once an in-sync standby holds `seq` (acks.py)."""
        await self.acks.wait_replicated(seq, force)

    def ship(self, ops: list[tuple[str, str]]) -> int:
        """Queue file operations for every connected standby (shipping.py)."""
        return self.files.ship(ops)

    def wake_files(self) -> None:
        """The audit log grew: let idle links send the new lines."""
        self.files.wake_files()

    async def wait_files(self, ticket: int) -> None:
        """Sync mode: return once an in-sync standby holds file operation `ticket`."""
        await self.files.wait_files(ticket)

    # --- serving ------------------------------------------------------------------------

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self._server = await asyncio.start_server(
            self._handle,
            host,
            port,
            ssl=ssl_context,
            reuse_address=True,
        )
        log.info("replication listening on %s:%s (%s)", host, port, self.mode)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions.values()):
            if session.writer is not None:
                session.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        self.store.writer.on_durable = None
        self.acks.fail_waiters()  # never acknowledge what no standby confirmed
        self.files.fail_waiters()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = str(writer.get_extra_info("peername"))
        session: StandbySession | None = None
        try:
            hello = await asyncio.wait_for(protocol.read_message(reader), 10)
            session = await self.greeting.greet(hello, peer, writer)
            if session is None:
                return
            acks = asyncio.create_task(self.acks.read_acks(reader, session))
            try:
                await self._stream(session, writer)
            finally:
                acks.cancel()
        except (EOFError, OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # the source is closing (step-down or shutdown): end quietly
        except protocol.ProtocolError as exc:
            log.warning("replication peer %s sent a bad frame (%s): dropped", peer, exc.message)
        except XceError as exc:
            log.warning("replication with %s ended: %s", peer, exc.message)
        finally:
            if session is not None and self.sessions.get(session.node) is session:
                del self.sessions[session.node]
                with contextlib.suppress(KeyError):
                    metrics.REPLICATION_LAG.remove(session.node)
                log.warning("standby %s disconnected", session.node)
            writer.close()
            self._tasks.discard(task)

    async def _stream(self, session: StandbySession, writer: asyncio.StreamWriter) -> None:
        watch = _Watched(self.greeting.auth_files(), time.monotonic(), self._users_stamp())
        if session.files_ok:
            await self.files.want_back(writer)
        while True:
            if self.space is not None and session.files_ok:
                await self.files.send_files(session, writer)
            else:
                session.files.clear()
            batch = await self._next_batch(session)
            if batch is None:
                await asyncio.sleep(0.05)  # never spin on a segment being rotated
                continue
            if batch:
                await protocol.send(
                    writer,
                    "records",
                    self.epochs.epoch,
                    {
                        "firstSeq": batch[0][0],
                        "count": len(batch),
                        "data": b"".join(d for _, d in batch),
                    },
                )
                session.sent_seq = batch[-1][0]
                continue
            session.wake.clear()
            if session.sent_seq < self.durable_seq:
                continue
            await self._idle(session, writer, watch)

    async def _next_batch(self, session: StandbySession) -> list[tuple[int, bytes]] | None:
        """The records after what `session` was sent, from memory or disk: [] when it has
        every durable record, None when the segment being read gave nothing yet."""
        cursor = session.sent_seq + 1
        if cursor > self.durable_seq:
            return []
        batch = self.backlog.from_ring(cursor)
        if batch is not None:
            return batch
        if cursor < self.backlog.first_on_disk():
            raise XceError(
                f"standby {session.node} fell behind the oldest WAL "
                "segment; it will start over from a checkpoint"
            )
        batch = await asyncio.get_running_loop().run_in_executor(
            None, self.backlog.from_disk, cursor, self.durable_seq, session.disk
        )
        return batch or None

    async def _idle(
        self, session: StandbySession, writer: asyncio.StreamWriter, watch: _Watched
    ) -> None:
        """Nothing to send: wait for a record, else send a heartbeat; every 2 s, send the
        key files and the users file again if they changed on disk."""
        # Not wait_for: on Python 3.11 it swallows a cancellation that arrives as `wake`
        # is set (every record), and the session would outlive the source's close.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.heartbeat_s):
                await session.wake.wait()
        if not session.wake.is_set():
            await protocol.send(
                writer,
                "heartbeat",
                self.epochs.epoch,
                {"lastSeq": self.durable_seq, "sentAt": time.time()},
            )
        if time.monotonic() - watch.checked > 2.0:
            watch.checked = time.monotonic()
            now_files = self.greeting.auth_files()
            if now_files != watch.files:
                watch.files = now_files
                await protocol.send(writer, "authFiles", self.epochs.epoch, watch.files)
            now_users = self._users_stamp()
            if now_users != watch.users:  # edited on disk (xce user --file)
                watch.users = now_users
                session.files.append((0, replicated_names.USERS, "put"))

    def _users_stamp(self) -> tuple[int, int] | None:
        path = self.space.users_path if self.space is not None else None
        try:
            st = path.stat() if path is not None else None
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size) if st is not None else None

    # --- views and switchover -----------------------------------------------------------

    def contacts(self) -> dict[str, float]:
        """Standby URL -> monotonic time of its last acknowledgement."""
        return {s.node: s.last_ack for s in self.sessions.values()}

    def view(self) -> list[dict[str, object]]:
        now = time.monotonic()
        return [
            {
                "node": s.node,
                "peer": s.peer,
                "acked_seq": s.acked_seq,
                "lag_records": max(self.durable_seq - s.acked_seq, 0),
                "in_sync": s.in_sync,
                "last_ack_s": round(now - s.last_ack, 3),
                "connected_at": s.connected_at,
                "release": s.release,
            }
            for s in self.sessions.values()
            if s.node not in self.shared.incompatible
        ] + [
            # refused at the door: never in sync, never a switchover target
            {**entry, "in_sync": False, "lag_records": None}
            for entry in self.shared.incompatible.values()
        ]

    async def hand_over(self, target: str | None, timeout: float = 10.0) -> str:
        """Switchover: wait until a standby holds every record, then tell it to take over.

        The caller has already stopped new writes (so the log cannot grow meanwhile).
        """
        candidates = [s for s in self.sessions.values() if target in (None, s.node)]
        if not candidates:
            raise Conflict(f"no connected standby {target or ''}".rstrip() + " to hand over to")
        if target is not None and not candidates[0].in_sync:
            lag = max(self.durable_seq - candidates[0].acked_seq, 0)
            raise Conflict(
                f"{target} is not caught up ({lag} records behind, or still receiving a "
                "checkpoint): try again once `xce cluster status` shows it in sync"
            )
        await self.store.writer.sync(durable=True)
        seq = self.store.writer.next_seq - 1
        deadline = time.monotonic() + timeout
        while True:
            ready = [s for s in candidates if s.acked_seq >= seq]
            if ready:
                break
            if time.monotonic() > deadline:
                raise Conflict(f"no standby caught up with record {seq} within {timeout:g} s")
            await asyncio.sleep(0.05)
        chosen = ready[0]
        assert chosen.writer is not None
        # The others first: they vote for the target (and for no one else) although they
        # still follow this primary, so any caught-up standby can be chosen, not only the
        # best placed one. A standby that misses this frame refuses its vote, as before.
        self.handing_to = chosen.node
        for other in list(self.sessions.values()):
            if other is not chosen and other.writer is not None:
                with contextlib.suppress(OSError, ConnectionError):
                    await protocol.send(
                        other.writer,
                        "handOver",
                        self.epochs.epoch,
                        {"target": chosen.node, "seq": seq},
                    )
        await protocol.send(chosen.writer, "promote", self.epochs.epoch, {"seq": seq})
        log.warning("switchover: standby %s holds record %d and takes over", chosen.node, seq)
        return chosen.node
