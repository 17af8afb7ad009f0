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
from dataclasses import dataclass

from xce.core.errors import Conflict, Unavailable, XceError
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.greeting import Greeting
from xce.ha.source_base import StandbySession
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


class ReplicationSource(Greeting):
    """The replication listener of a primary: one link per standby (parts: source_base.py,
    backlog.py, shipping.py, acks.py, greeting.py)."""

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
        for _, fut in self._ack_waiters + self._file_waiters:
            if not fut.done():  # never acknowledge what no standby confirmed
                fut.set_exception(
                    Unavailable(
                        "the primary stepped down before a standby confirmed this change: it may "
                        "or may not survive, so check before retrying"
                    )
                )
        self._ack_waiters = []
        self._file_waiters = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = str(writer.get_extra_info("peername"))
        session: StandbySession | None = None
        try:
            hello = await asyncio.wait_for(protocol.read_message(reader), 10)
            session = await self._greet(hello, peer, writer)
            if session is None:
                return
            acks = asyncio.create_task(self._read_acks(reader, session))
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
        watch = _Watched(self._auth_files(), time.monotonic(), self._users_stamp())
        if session.files_ok:
            await self._want_back(writer)
        while True:
            if self.space is not None and session.files_ok:
                await self._send_files(session, writer)
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
        batch = self._from_ring(cursor)
        if batch is not None:
            return batch
        if cursor < self._first_on_disk():
            raise XceError(
                f"standby {session.node} fell behind the oldest WAL "
                "segment; it will start over from a checkpoint"
            )
        batch = await asyncio.get_running_loop().run_in_executor(
            None, self._from_disk, cursor, self.durable_seq, session.disk
        )
        return batch or None

    async def _idle(
        self, session: StandbySession, writer: asyncio.StreamWriter, watch: _Watched
    ) -> None:
        """Nothing to send: wait for a record, else send a heartbeat; every 2 s, send the
        key files and the users file again if they changed on disk."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.wake.wait(), self.heartbeat_s)
        if not session.wake.is_set():
            await protocol.send(
                writer,
                "heartbeat",
                self.epochs.epoch,
                {"lastSeq": self.durable_seq, "sentAt": time.time()},
            )
        if time.monotonic() - watch.checked > 2.0:
            watch.checked = time.monotonic()
            now_files = self._auth_files()
            if now_files != watch.files:
                watch.files = now_files
                await protocol.send(writer, "authFiles", self.epochs.epoch, watch.files)
            now_users = self._users_stamp()
            if now_users != watch.users:  # edited on disk (xce user --file)
                watch.users = now_users
                session.files.append((0, hafiles.USERS, "put"))

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
            }
            for s in self.sessions.values()
        ]

    async def hand_over(self, target: str | None, timeout: float = 10.0) -> str:
        """Switchover: wait until a standby holds every record, then tell it to take over.

        The caller has already stopped new writes (so the log cannot grow meanwhile).
        """
        candidates = [s for s in self.sessions.values() if target in (None, s.node)]
        if not candidates:
            raise Conflict(f"no connected standby {target or ''}".rstrip() + " to hand over to")
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
        await protocol.send(chosen.writer, "promote", self.epochs.epoch, {"seq": seq})
        log.warning("switchover: standby %s holds record %d and takes over", chosen.node, seq)
        return chosen.node
