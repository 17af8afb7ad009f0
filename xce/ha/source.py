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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xce import metrics
from xce.core.errors import Conflict, Unauthorized, Unavailable, XceError
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.epochs import EpochStore
from xce.store.checkpoint import list_checkpoints
from xce.store.durable import DurableLog
from xce.store.recovery import checkpoint_dir, wal_dir
from xce.store.wal.framing import CorruptRecord, read_frames
from xce.store.wal.reader import list_segments

log = logging.getLogger("xce.ha.source")
RING_BYTES = 64 * 1024 * 1024
BATCH_BYTES = 1024 * 1024
SNAPSHOT_CHUNK = 4 * 1024 * 1024


@dataclass
class DiskCursor:
    """Where the last read of a WAL segment stopped: catching up through a 64 MiB segment
    in 1 MiB batches then reads and scans the file about once, not once per batch."""

    path: Path | None = None
    data: bytes = b""
    seq: int = 0
    offset: int = 0


@dataclass
class StandbySession:
    node: str
    peer: str
    connected_at: float = field(default_factory=time.time)
    sent_seq: int = 0
    acked_seq: int = 0
    last_ack: float = field(default_factory=time.monotonic)
    in_sync: bool = False
    snapshot: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    writer: asyncio.StreamWriter | None = None
    disk: DiskCursor = field(default_factory=DiskCursor)
    # Files (xce/ha/files.py): operations queued for this standby as (ticket, name, op);
    # tickets before `first_ticket` were queued before it connected (its catch-up asks for
    # what it lacks); `audit_sent` bytes of the audit log it holds (None: not shipped).
    files: deque[tuple[int, str, str]] = field(default_factory=deque)
    first_ticket: int = 1
    acked_ticket: int = 0
    audit_sent: int | None = None
    audit_replace: bool = False
    uploads: set[str] = field(default_factory=set)  # upload names this standby was sent
    files_ok: bool = True  # the standby takes files (its hello says so)
    file_progress: float = 0.0  # monotonic time the last file piece left for it


class ReplicationSource:
    def __init__(
        self,
        store: DurableLog,
        epochs: EpochStore,
        auth_dir: Path,
        verify_token: Callable[[str], None],
        state: object,
        mode: str = "async",
        sync_timeout_s: float = 2.0,
        heartbeat_s: float = 0.5,
        on_higher_epoch: Callable[[int], None] = lambda epoch: None,
        space: hafiles.FileSpace | None = None,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.auth_dir = auth_dir
        self.verify_token = verify_token
        self.state = state
        self.mode = mode
        self.sync_timeout_s = sync_timeout_s
        self.heartbeat_s = heartbeat_s
        self.on_higher_epoch = on_higher_epoch
        self.sessions: dict[str, StandbySession] = {}
        self.degraded = False
        self._ring: deque[tuple[int, bytes]] = deque()
        self._ring_bytes = 0
        self._ack_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.space = space  # None: no files beside the records (tests of the log alone)
        self._ticket = 0
        self._file_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._receiver: hafiles.Receiver | None = None  # files a standby returns
        self._skipping: set[str] = set()  # returned files that are here after all
        self._warned_files = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        store.writer.on_durable = self.on_durable

    # --- feeding ------------------------------------------------------------------------

    def on_durable(self, batch: list[tuple[int, bytes]]) -> None:
        """Called by the WAL writer with each group once it is on disk."""
        for seq, data in batch:
            if self._ring and self._ring[-1][0] != seq - 1:
                self._ring.clear()
                self._ring_bytes = 0
            self._ring.append((seq, data))
            self._ring_bytes += len(data)
        while self._ring_bytes > RING_BYTES and len(self._ring) > 1:
            self._ring_bytes -= len(self._ring.popleft()[1])
        for session in self.sessions.values():
            session.wake.set()

    @property
    def durable_seq(self) -> int:
        return self.store.writer.durable_seq

    def _from_ring(self, cursor: int) -> list[tuple[int, bytes]] | None:
        if not self._ring or self._ring[0][0] > cursor:
            return None
        start = cursor - self._ring[0][0]
        out, size = [], 0
        for i in range(start, len(self._ring)):
            seq, data = self._ring[i]
            if seq > self.durable_seq or size >= BATCH_BYTES:
                break
            out.append((seq, data))
            size += len(data)
        return out

    def _first_on_disk(self) -> int:
        segments = list_segments(wal_dir(self.store.state_dir))
        return segments[0][0] if segments else self.durable_seq + 1

    def _from_disk(self, cursor: int, last: int, at: DiskCursor) -> list[tuple[int, bytes]]:
        """Runs in a thread: records `cursor`.. (at most `last`) read back from segments,
        resuming from `at` where the previous batch stopped in the same segment. What was
        read of the segment being written stays valid (records are only appended); when
        that copy runs out before `last`, the file is read again from where it stopped."""
        segments = list_segments(wal_dir(self.store.state_dir))
        out: list[tuple[int, bytes]] = []
        size = 0
        resume = (at.path, at.data, at.seq, at.offset)
        at.path, at.data = None, b""
        for i, (first, path) in enumerate(segments):
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            if following is not None and following <= cursor:
                continue
            fresh = not (resume[0] == path and resume[2] == cursor)
            if fresh:
                data, seq, offset = path.read_bytes(), first, 0
            else:
                _, data, seq, offset = resume
            while True:
                try:
                    for fr in read_frames(data, offset):
                        if seq > last or size >= BATCH_BYTES:
                            at.path, at.data, at.seq, at.offset = path, data, seq, fr.offset
                            return out
                        if seq >= cursor:
                            chunk = data[fr.offset : fr.end]
                            out.append((seq, chunk))
                            size += len(chunk)
                        seq += 1
                        offset = fr.end
                except CorruptRecord:
                    if fresh or following is not None:
                        return out  # the tail being written right now
                if fresh or following is not None:
                    break
                data, fresh = path.read_bytes(), True  # an older copy of the active segment
        return out

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
        self._tasks.add(task)  # type: ignore[arg-type]
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
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _refuse(self, writer: asyncio.StreamWriter, why: str) -> None:
        with contextlib.suppress(Exception):
            await protocol.send(writer, "refuse", self.epochs.epoch, why)

    async def _greet(
        self, hello: protocol.Message, peer: str, writer: asyncio.StreamWriter
    ) -> StandbySession | None:
        if hello.kind != "hello":
            raise protocol.ProtocolError(f"expected hello, got {hello.kind}")
        try:
            self.verify_token(hello.body["token"])
        except Unauthorized as exc:
            log.warning("replication peer %s refused: %s", peer, exc.message)
            await self._refuse(writer, exc.message)
            return None
        if hello.epoch > self.epochs.epoch:  # a trusted candidate knows a newer term
            await self._refuse(writer, f"stale primary: epoch {self.epochs.epoch} < {hello.epoch}")
            self.on_higher_epoch(hello.epoch)
            return None
        node = hello.body["node"] or peer
        last_seq, last_epoch = hello.body["lastSeq"], hello.body["lastEpoch"]
        diverged = await self._diverged(hello.body)
        snapshot = (
            bool(hello.body.get("wantSnapshot"))  # a record did not apply on the standby
            or diverged is not None
            or last_seq + 1 < self._first_on_disk()
        )
        if diverged is not None:
            log.error(
                "standby %s diverged (%s): its records %d..%d are not this primary's "
                "and are discarded; sending a checkpoint",
                node,
                diverged,
                self._common_end(last_seq, last_epoch) + 1,
                last_seq,
            )
        old = self.sessions.pop(node, None)
        if old is not None and old.writer is not None:
            old.writer.close()
        session = StandbySession(
            node, peer, writer=writer, snapshot=snapshot, acked_seq=0 if snapshot else last_seq
        )
        await self._greet_files(session, hello.body)
        session.sent_seq = session.acked_seq
        # From here on (no await in between) every file queued reaches this standby.
        session.first_ticket = self._ticket + 1
        self.sessions[node] = session
        history = [n for pair in self.epochs.history for n in pair]
        start = last_seq + 1
        snapshot_path: Path | None = None
        if snapshot:
            seq, snapshot_path = await self._newest_checkpoint()
            start = seq + 1
        await protocol.send(
            writer,
            "welcome",
            self.epochs.epoch,
            {
                "startSeq": start,
                "snapshot": snapshot,
                "mode": self.mode,
                "history": history,
                "files": self.space is not None,
            },
        )
        log.info(
            "standby %s (%s) connected at record %d%s",
            node,
            peer,
            last_seq,
            ": sending a checkpoint first" if snapshot else "",
        )
        await self._send_auth_files(writer)
        if snapshot_path is not None:
            await self._send_snapshot(writer, snapshot_path, start - 1)
        session.sent_seq = start - 1
        return session

    async def _greet_files(self, session: StandbySession, hello: dict[str, object]) -> None:
        """Where this standby's audit log stands against ours, and the users file."""
        if self.space is None or not hello.get("files"):
            session.files_ok = False  # a standby of an older version: records only
            return
        size = int(hello.get("auditSize") or 0)  # type: ignore[call-overload]
        sha = bytes(hello.get("auditSha") or b"")  # type: ignore[arg-type]
        session.audit_sent = 0
        if size:
            path = self.space.audit_path
            ours = path.stat().st_size if path.exists() else 0
            same = (
                ours >= size
                and await asyncio.get_running_loop().run_in_executor(
                    None, hafiles.sha256_of, path, size
                )
                == sha
            )
            if same:
                session.audit_sent = size
            else:
                session.audit_replace = True
        if self.space.users_path is not None and self.space.users_path.is_file():
            session.files.append((0, hafiles.USERS, "put"))

    def _common_end(self, last_seq: int, last_epoch: int) -> int:
        """The last record the standby's log may share with ours (for the log line)."""
        first = self.epochs.first_of(last_epoch)
        end = self.epochs.end_of(last_epoch)
        if first is None:
            return 0
        return min(last_seq, end if end is not None else last_seq) if first <= last_seq else 0

    async def _diverged(self, hello: dict[str, object]) -> str | None:
        """Why the standby's log is not a prefix of ours, or None once it is verified.

        Three checks: (epoch, seq) against our history (a tail past the end of its epoch
        here), the standby's epoch history against ours (every term it holds records of
        must have begun at the same record here), and content: the CRC of its last record
        against ours at that position. The last one tells two different tails of one epoch
        apart. A standby whose log cannot be verified gets a checkpoint."""
        last_seq = int(hello["lastSeq"])  # type: ignore[call-overload]
        last_epoch = int(hello["lastEpoch"])  # type: ignore[call-overload]
        if last_seq == 0:
            return None
        if last_seq > self.durable_seq:
            return f"it holds record {last_seq}, past this primary's end {self.durable_seq}"
        end = self.epochs.end_of(last_epoch)
        if end is not None and last_seq > end:
            return f"epoch {last_epoch} ended at record {end} here"
        flat = list(hello.get("history") or [])  # type: ignore[call-overload]
        mine = dict(self.epochs.history)
        for epoch, first in zip(flat[::2], flat[1::2], strict=True):
            if epoch <= last_epoch and first <= last_seq and mine.get(epoch) != first:
                here = mine.get(epoch)
                return (
                    f"its epoch {epoch} began at record {first}, here "
                    f"{'never' if here is None else f'at {here}'}"
                )
        if not hello.get("lastCrcKnown"):
            return (
                "its last record cannot be read back to compare (its log ends at a "
                "checkpoint, or it predates content checks)"
            )
        crc = await self._record_crc(last_seq)
        if crc is None:
            return f"record {last_seq} cannot be read here to compare"
        if crc != hello.get("lastCrc"):
            return (
                f"record {last_seq} differs in content (crc {hello.get('lastCrc'):08x}, "
                f"here {crc:08x})"
            )
        return None

    async def _record_crc(self, seq: int) -> int | None:
        """The CRC of our record `seq`, from memory or the WAL segments."""
        from xce.store.wal.framing import FRAME_HEADER

        found = self._from_ring(seq)
        if not found or found[0][0] != seq:
            if seq < self._first_on_disk():
                return None
            found = await asyncio.get_running_loop().run_in_executor(
                None, self._from_disk, seq, seq, DiskCursor()
            )
        if not found or found[0][0] != seq:
            return None
        return int(FRAME_HEADER.unpack_from(found[0][1], 0)[1])

    async def _newest_checkpoint(self) -> tuple[int, Path]:
        found = list_checkpoints(checkpoint_dir(self.store.state_dir))
        if not found:
            await self.store.checkpoint(self.state)  # type: ignore[arg-type]
            found = list_checkpoints(checkpoint_dir(self.store.state_dir))
        return found[0]

    async def _send_snapshot(self, writer: asyncio.StreamWriter, path: Path, seq: int) -> None:
        # Read whole before sending: the checkpoint may be pruned by a newer one meanwhile.
        data = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
        for start in range(0, max(len(data), 1), SNAPSHOT_CHUNK):
            piece = data[start : start + SNAPSHOT_CHUNK]
            await protocol.send(
                writer,
                "snapshotChunk",
                self.epochs.epoch,
                {"seq": seq, "data": piece, "last": start + SNAPSHOT_CHUNK >= len(data)},
            )

    def _auth_files(self) -> list[tuple[str, bytes]]:
        if not self.auth_dir.is_dir():
            return []
        return sorted(
            (p.name, p.read_bytes())
            for p in self.auth_dir.iterdir()
            if p.is_file() and not p.name.startswith(".")
        )

    async def _send_auth_files(self, writer: asyncio.StreamWriter) -> list[tuple[str, bytes]]:
        files = self._auth_files()
        await protocol.send(writer, "authFiles", self.epochs.epoch, files)
        return files

    async def _stream(self, session: StandbySession, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        files = self._auth_files()
        last_files_check = time.monotonic()
        users = self._users_stamp()
        if session.files_ok:
            await self._want_back(writer)
        while True:
            if self.space is not None and session.files_ok:
                await self._send_files(session, writer)
            else:
                session.files.clear()
            cursor = session.sent_seq + 1
            batch: list[tuple[int, bytes]] | None = None
            if cursor <= self.durable_seq:
                batch = self._from_ring(cursor)
                if batch is None:
                    if cursor < self._first_on_disk():
                        raise XceError(
                            f"standby {session.node} fell behind the oldest WAL "
                            "segment; it will start over from a checkpoint"
                        )
                    batch = await loop.run_in_executor(
                        None, self._from_disk, cursor, self.durable_seq, session.disk
                    )
                    if not batch:
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.wake.wait(), self.heartbeat_s)
            if not session.wake.is_set():
                await protocol.send(
                    writer,
                    "heartbeat",
                    self.epochs.epoch,
                    {"lastSeq": self.durable_seq, "sentAt": time.time()},
                )
            if time.monotonic() - last_files_check > 2.0:
                last_files_check = time.monotonic()
                now_files = self._auth_files()
                if now_files != files:
                    files = now_files
                    await protocol.send(writer, "authFiles", self.epochs.epoch, files)
                now_users = self._users_stamp()
                if now_users != users:  # edited on disk (xce user --file)
                    users = now_users
                    session.files.append((0, hafiles.USERS, "put"))

    def _users_stamp(self) -> tuple[int, int] | None:
        path = self.space.users_path if self.space is not None else None
        try:
            st = path.stat() if path is not None else None
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size) if st is not None else None

    # --- files (xce/ha/files.py) --------------------------------------------------------

    def ship(self, ops: list[tuple[str, str]]) -> int:
        """Queue file operations (name, "put" | "drop" | "move:<source>") for every
        connected standby, in order with the records: call it before the commit whose
        records name the files. Returns the ticket to wait for (`wait_files`)."""
        if self.space is None or not ops:
            return 0
        for name, op in ops:
            self._ticket += 1
            for session in self.sessions.values():
                session.files.append((self._ticket, name, op))
        for session in self.sessions.values():
            session.wake.set()
        return self._ticket

    def wake_files(self) -> None:
        """The audit log grew: let idle links send the new lines."""
        for session in self.sessions.values():
            session.wake.set()

    async def _send_files(self, session: StandbySession, writer: asyncio.StreamWriter) -> None:
        assert self.space is not None
        loop = asyncio.get_running_loop()
        epoch = self.epochs.epoch
        while session.files:
            ticket, name, op = session.files.popleft()
            path = self.space.path_of(name)
            sent = -1
            if op.startswith(hafiles.MOVE):
                if op[len(hafiles.MOVE) :] in session.uploads:  # it has the upload: move it
                    session.uploads.discard(op[len(hafiles.MOVE) :])
                    await protocol.send(
                        writer,
                        "fileData",
                        epoch,
                        {"ticket": ticket, "name": name, "op": op, "last": True},
                    )
                    continue
                op = "put"  # uploaded before it connected: the content itself
            if name in session.uploads and op == "drop":
                session.uploads.discard(name)
            if op == "put" and path is not None:
                sent = await hafiles.send_put(
                    writer,
                    epoch,
                    name,
                    path,
                    ticket,
                    lambda: setattr(session, "file_progress", time.monotonic()),
                )
                if sent >= 0 and name.startswith(hafiles.FILES + "uploads/"):
                    session.uploads.add(name)
            if sent < 0:  # gone meanwhile (or dropped): the standby drops it too
                await protocol.send(
                    writer,
                    "fileData",
                    epoch,
                    {"ticket": ticket, "name": name, "op": "drop", "last": True},
                )
        if session.audit_sent is None:
            return
        path = self.space.audit_path
        if session.audit_replace:
            session.audit_replace = False
            session.audit_sent = max(await hafiles.send_put(writer, epoch, hafiles.AUDIT, path), 0)
        while True:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return
            if size <= session.audit_sent:
                return
            data = await loop.run_in_executor(None, hafiles.read_from, path, session.audit_sent)
            if not data:
                return
            await protocol.send(
                writer,
                "fileData",
                epoch,
                {
                    "name": hafiles.AUDIT,
                    "op": "append",
                    "offset": session.audit_sent,
                    "data": data,
                    "last": True,
                },
            )
            session.audit_sent += len(data)

    async def _want_back(self, writer: asyncio.StreamWriter) -> None:
        """Ask a standby that just connected for the job files our records name that are
        not here (stored by it while it was primary, not replicated before a failover)."""
        if self.space is None:
            return
        missing = await hafiles.missing_in_state(self.space, self.state)
        missing = [n for n in missing if n.startswith(hafiles.FILES)]
        for start in range(0, len(missing), 10_000):
            await protocol.send(
                writer, "fileWant", self.epochs.epoch, {"names": missing[start : start + 10_000]}
            )

    async def _take_back(self, session: StandbySession, body: dict[str, object]) -> None:
        """A job file a standby sends because we asked (`_want_back`): stored only if it is
        still missing here, so a standby never overwrites the primary's own files."""
        assert self.space is not None
        name = str(body["name"])
        if not name.startswith(hafiles.FILES) or body.get("op") != "put":
            raise protocol.ProtocolError(f"a standby may only return job files, not {name!r}")
        if self._receiver is None:
            self._receiver = hafiles.Receiver(self.space)
        path = self.space.path_of(name)
        if body.get("offset") == 0:
            self._skipping.discard(name)
            if path is not None and path.exists():
                self._skipping.add(name)
        if name in self._skipping:
            if body.get("last"):
                self._skipping.discard(name)
            return
        try:
            await asyncio.to_thread(self._receiver.apply, body)
        except (XceError, OSError) as exc:
            log.warning(
                "job file %s from standby %s not taken: %s",
                name[6:],
                session.node,
                getattr(exc, "message", None) or exc,
            )
            return
        if body.get("last"):
            log.warning("job file %s was only on standby %s: copied here", name[6:], session.node)

    def _on_want(self, session: StandbySession, names: list[str]) -> None:
        assert self.space is not None
        for name in names[:100_000]:
            try:
                self.space.path_of(name)
            except XceError:
                log.warning(
                    "standby %s asked for %r, not a replicated file: ignored",
                    session.node,
                    name[:200],
                )
                continue
            if name == hafiles.AUDIT:
                session.audit_sent, session.audit_replace = 0, True
            else:
                session.files.append((0, name, "put"))
        session.wake.set()

    def _release_files(self) -> None:
        keep = []
        for ticket, fut in self._file_waiters:
            if any(
                s.in_sync and s.files_ok and s.first_ticket <= ticket <= s.acked_ticket
                for s in self.sessions.values()
            ):
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((ticket, fut))
        self._file_waiters = keep

    async def wait_files(self, ticket: int) -> None:
        """Sync mode: return once an in-sync standby that was connected when `ticket` was
        queued has made it durable, or degrade to async after `sync_timeout_s`."""
        if self.mode != "sync" or ticket == 0:
            return
        if not any(
            s.in_sync and s.files_ok and s.first_ticket <= ticket for s in self.sessions.values()
        ):
            if not any(s.in_sync for s in self.sessions.values()):
                self._degrade("no standby is connected and caught up (files)")
            elif not self._warned_files and not any(s.files_ok for s in self.sessions.values()):
                self._warned_files = True
                log.error(
                    "ALERT: no connected standby takes job files (an older "
                    "version): after a failover jobs may miss their files"
                )
            # else: a standby that connected since; its catch-up asks for these files
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._file_waiters.append((ticket, fut))
        self._release_files()
        try:
            # A large file takes longer than sync_timeout_s to cross: wait while its
            # pieces keep leaving; give up after sync_timeout_s with no progress.
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(fut), self.sync_timeout_s)
                    break
                except TimeoutError:
                    moving = max(
                        (
                            s.file_progress
                            for s in self.sessions.values()
                            if s.files_ok and s.first_ticket <= ticket
                        ),
                        default=0.0,
                    )
                    if time.monotonic() - moving > self.sync_timeout_s:
                        raise
        except TimeoutError:
            self._file_waiters = [(q, f) for q, f in self._file_waiters if f is not fut]
            fut.cancel()
            for s in self.sessions.values():
                if s.files_ok and s.acked_ticket < ticket:
                    s.in_sync = False  # in sync again with its next acknowledgement
            self._degrade(
                f"no standby acknowledged file operation {ticket} within {self.sync_timeout_s:g} s"
            )

    async def _read_acks(self, reader: asyncio.StreamReader, session: StandbySession) -> None:
        try:
            while True:
                msg = await protocol.read_message(reader)
                if msg.epoch > self.epochs.epoch:
                    self.on_higher_epoch(msg.epoch)
                    raise XceError(f"standby {session.node} knows a newer epoch {msg.epoch}")
                if msg.kind == "fileAck":
                    session.acked_ticket = max(session.acked_ticket, msg.body["ticket"])
                    self._release_files()
                    continue
                if msg.kind == "fileData":
                    await self._take_back(session, msg.body)
                    continue
                if msg.kind == "fileWant":
                    self._on_want(session, [str(n) for n in msg.body["names"]])
                    continue
                if msg.kind != "ack":
                    raise protocol.ProtocolError(f"expected ack, got {msg.kind}")
                session.acked_seq = max(session.acked_seq, msg.body["durableSeq"])
                session.last_ack = time.monotonic()
                if not session.in_sync and session.acked_seq >= self.durable_seq:
                    session.in_sync = True
                    if self.degraded and self.mode == "sync":
                        self.degraded = False
                        log.warning(
                            "sync replication restored: standby %s is caught up", session.node
                        )
                metrics.REPLICATION_LAG.labels(session.node).set(
                    max(self.durable_seq - session.acked_seq, 0)
                )
                self._release_acks()
                self._release_files()
        except (EOFError, ConnectionError, protocol.ProtocolError, XceError) as exc:
            log.info("replication acks from %s ended: %s", session.node, exc)
            if session.writer is not None:
                session.writer.close()

    # --- sync mode ----------------------------------------------------------------------

    def _release_acks(self) -> None:
        best = max((s.acked_seq for s in self.sessions.values() if s.in_sync), default=0)
        keep = []
        for seq, fut in self._ack_waiters:
            if seq <= best:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self._ack_waiters = keep

    async def wait_replicated(self, seq: int, force: bool = False) -> None:
        """Sync mode (or `force`, in any mode: job number reservations): return once an
        in-sync standby holds `seq` durably, or degrade (async mode: warn) after
        `sync_timeout_s`."""
        if self.mode != "sync" and not force:
            return
        sync = self.mode == "sync"
        if not any(s.in_sync for s in self.sessions.values()):
            if sync:
                self._degrade("no standby is connected and caught up")
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
            await asyncio.wait_for(asyncio.shield(fut), self.sync_timeout_s)
        except TimeoutError:
            self._ack_waiters = [(q, f) for q, f in self._ack_waiters if f is not fut]
            fut.cancel()
            for s in self.sessions.values():
                if s.acked_seq < seq:
                    s.in_sync = False
            why = f"no standby acknowledged record {seq} within {self.sync_timeout_s:g} s"
            if sync:
                self._degrade(why)
            else:
                log.warning("%s (job numbers)", why)

    def _degrade(self, why: str) -> None:
        if not self.degraded:
            self.degraded = True
            metrics.SYNC_DEGRADED.inc()
            log.error(
                "ALERT: sync replication degraded to async: %s; acknowledged changes "
                "may be lost if this primary fails before a standby catches up",
                why,
            )

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
