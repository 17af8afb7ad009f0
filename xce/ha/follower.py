"""The standby's side of replication: follow the primary's WAL into our own.

The standby keeps the same state a primary would (one `ClusterState`, fed by `apply`) and
the same files (its own WAL and checkpoints, written by the same `DurableLog`), so a
promotion is just "start serving": nothing to replay. Each batch of records is checked (CRC,
contiguous sequence numbers, epoch no older than ours), applied, appended in the primary's
exact bytes, made durable, and only then acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import ssl
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from xce.auth.files import atomic_write, private_dir
from xce.auth.keys import key_dir
from xce.core.errors import XceError
from xce.core.events import Event
from xce.core.state import ClusterState
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.epochs import EpochStore
from xce.store import replicated_names
from xce.store.checkpoint import checkpoint_name, list_checkpoints
from xce.store.durable import DurableLog, StoreSettings
from xce.store.recovery import checkpoint_dir, wal_dir
from xce.store.wal.framing import FRAME_HEADER, CorruptRecord, iter_frames, read_frames
from xce.store.wal.reader import list_segments, mapped, records_start
from xce.store.wal.writer import fsync_dir
from xce.wire.codec import WireError, decode_entry

log = logging.getLogger("xce.ha.follower")


class Diverged(XceError):
    code = "replication_diverged"


class CannotApply(XceError):
    """A replicated record does not apply to this standby's state (a standby of an older
    version that purged on its own, a bug): retrying the same record would fail for ever,
    so the next hello asks the primary for a checkpoint transfer instead."""

    code = "replication_cannot_apply"


class Follower:
    """Owns the standby's `DurableLog` across connections (and snapshot restarts)."""

    def __init__(
        self,
        state_dir: Path,
        settings: StoreSettings,
        epochs: EpochStore,
        node_url: str,
        token: str,
        ssl_context: ssl.SSLContext | None,
        store: DurableLog | None = None,
        space: hafiles.FileSpace | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.settings = settings
        self.epochs = epochs
        self.node_url = node_url
        self.token = token
        self.ssl_context = ssl_context
        self.store = store if store is not None else DurableLog.open(state_dir, settings)
        # The epoch of our last record (not the newest epoch we have heard of): the primary
        # checks it against its history to find a diverged tail.
        self.last_epoch = self.store.recovered.last_epoch
        # The CRC of our last record: the primary compares it with its own record at that
        # position, so two different tails of one epoch are told apart by content.
        self.last_crc = last_record_crc(state_dir, self.durable_seq)
        self.last_contact = time.monotonic()
        self.primary: str | None = None
        self.promote_requested = False
        # A switchover's target named by our primary, and when (monotonic): we vote for it
        # although we still follow that primary (xce/ha/campaign.py `busy`).
        self.handover: tuple[str, float] | None = None
        self.want_snapshot = False  # set when a record did not apply (see CannotApply)
        self._checkpoints: asyncio.Task[None] | None = None
        # Files beside the records (xce/ha/files.py); None: the log alone (unit tests).
        self.space = space
        self.receiver = hafiles.Receiver(space) if space is not None else None
        self.files_ok = False  # the primary of this link takes fileAck/fileWant
        # Called once a primary's welcome shows this build can follow it (the node then
        # clears an earlier incompatibility: xce/ha/node_base.py)
        self.on_compatible: Callable[[], None] | None = None

    @property
    def state(self) -> ClusterState:
        return self.store.recovered.state

    @property
    def durable_seq(self) -> int:
        return self.store.writer.durable_seq

    def start_checkpoints(self) -> None:
        self._checkpoints = asyncio.create_task(self.store.run_checkpoints(self.state))

    async def stop_checkpoints(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            with contextlib.suppress(BaseException):
                await self._checkpoints
            self._checkpoints = None

    async def follow(self, primary_url: str, address: str, silence_s: float) -> None:
        """One connection to the primary's replication listener, until it ends.

        Returns when the primary tells us to take over (`promote_requested` is set); raises
        when the link drops, stays silent for `silence_s` (a frozen primary keeps its TCP
        connection open), or carries a bad stream (`Diverged`, `ProtocolError`).
        """
        reader, writer = await self._connect(address)
        self.primary = primary_url
        audit_size, audit_sha = (
            await asyncio.to_thread(hafiles.audit_mark, self.space.audit_path)
            if self.space is not None
            else (0, b"")
        )
        try:
            await self._hello(writer, audit_size, audit_sha)
            welcome = await self._welcome(reader, primary_url)
            snapshot: list[bytes] = []
            self.files_ok = bool(welcome.body.get("files"))  # an older primary: records only
            if not welcome.body["snapshot"]:
                await self._want(writer, None)
            while True:
                msg = await asyncio.wait_for(protocol.read_message(reader), silence_s)
                self.last_contact = time.monotonic()
                if msg.epoch < self.epochs.epoch:
                    raise XceError(
                        f"frame from epoch {msg.epoch} < {self.epochs.epoch}: "
                        "refused (stale primary)"
                    )
                self.epochs.observe(msg.epoch)
                if await self._on_message(writer, msg, snapshot):
                    return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connect(self, address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, _, port = address.rpartition(":")
        return await asyncio.wait_for(
            asyncio.open_connection(
                host.strip("[]"),
                int(port),
                ssl=self.ssl_context,
                server_hostname=host.strip("[]") if self.ssl_context else None,
            ),
            3,
        )

    async def _hello(self, writer: asyncio.StreamWriter, audit_size: int, audit_sha: bytes) -> None:
        """Where this log ends (and its history, last record's CRC, audit log) for the
        primary to continue from, or to send a checkpoint (xce/ha/greeting.py)."""
        await protocol.send(
            writer,
            "hello",
            self.epochs.epoch,
            {
                "auditSize": audit_size,
                "auditSha": audit_sha,
                "files": self.space is not None,
                "node": self.node_url,
                "token": self.token,
                "lastSeq": self.durable_seq,
                "lastEpoch": self.last_epoch,
                "wantSnapshot": self.want_snapshot,
                "history": [n for pair in self.epochs.history for n in pair],
                "lastCrc": self.last_crc or 0,
                "lastCrcKnown": self.last_crc is not None,
                **protocol.versions(),
            },
        )

    async def _welcome(self, reader: asyncio.StreamReader, primary_url: str) -> protocol.Message:
        """The primary's answer to the hello: refused, stale, or its epoch history to adopt."""
        welcome = await asyncio.wait_for(protocol.read_message(reader), 30)
        if welcome.kind == "refuse":
            text = str(welcome.body["text"])
            if text.startswith(protocol.INCOMPATIBLE):
                raise protocol.Incompatible(text.removeprefix(protocol.INCOMPATIBLE))
            raise XceError(f"the primary refused replication: {text}")
        if welcome.kind != "welcome":
            raise protocol.ProtocolError(f"expected welcome, got {welcome.kind}")
        why = protocol.cannot_follow(welcome.body, primary_url)
        if why is not None:  # a primary that does not check (or misjudges) us: we do
            raise protocol.Incompatible(why)
        if welcome.epoch < self.epochs.epoch:
            raise XceError(
                f"{primary_url} is a stale primary (epoch {welcome.epoch} < {self.epochs.epoch})"
            )
        if self.on_compatible is not None:
            self.on_compatible()
        flat = welcome.body["history"]
        self.epochs.adopt_history(list(zip(flat[::2], flat[1::2], strict=True)))
        self.epochs.observe(welcome.epoch)
        log.info(
            "following %s from record %d%s",
            primary_url,
            welcome.body["startSeq"],
            " after a checkpoint transfer" if welcome.body["snapshot"] else "",
        )
        return welcome

    async def _on_message(
        self, writer: asyncio.StreamWriter, msg: protocol.Message, snapshot: list[bytes]
    ) -> bool:
        """Act on one frame of the stream; True when the primary asked us to take over.
        `snapshot` gathers the pieces of a checkpoint being transferred."""
        if msg.kind == "records":
            events = await self._apply(msg.body["firstSeq"], msg.body["data"])
            await protocol.send(writer, "ack", self.epochs.epoch, {"durableSeq": self.durable_seq})
            if self.space is not None:
                await self._want(writer, hafiles.names_in_events(self.state, events))
        elif msg.kind == "fileData":
            await self._file(writer, msg.body)
        elif msg.kind == "fileWant":
            await self._give_back(writer, [str(n) for n in msg.body["names"]])
        elif msg.kind == "heartbeat":
            await protocol.send(writer, "ack", self.epochs.epoch, {"durableSeq": self.durable_seq})
        elif msg.kind == "snapshotChunk":
            snapshot.append(msg.body["data"])
            if msg.body["last"]:
                data = b"".join(snapshot)
                snapshot.clear()
                await self._install_snapshot(msg.body["seq"], data)
                await protocol.send(
                    writer, "ack", self.epochs.epoch, {"durableSeq": self.durable_seq}
                )
                await self._want(writer, None)
        elif msg.kind == "authFiles":
            self._write_auth_files(msg.body["files"])
        elif msg.kind == "promote":
            if self.durable_seq < msg.body["seq"]:
                raise Diverged(
                    f"asked to take over at record {msg.body['seq']} but "
                    f"only {self.durable_seq} is here"
                )
            self.promote_requested = True
            return True
        elif msg.kind == "handOver":
            self.handover = (str(msg.body["target"]), time.monotonic())
            log.warning("the primary hands its role over to %s", msg.body["target"])
        elif msg.kind == "refuse":
            raise XceError(f"the primary ended replication: {msg.body['text']}")
        else:
            raise protocol.ProtocolError(f"unexpected {msg.kind} from the primary")
        return False

    async def _want(self, writer: asyncio.StreamWriter, names: Iterable[str] | None) -> None:
        """Ask the primary for the files these names (None: every one the state's records
        name) point at that are not here."""
        if self.space is None or not self.files_ok:
            return
        if names is None:
            missing = await hafiles.missing_in_state(self.space, self.state)
        else:
            missing = await asyncio.to_thread(self.space.missing, list(names))
        for start in range(0, len(missing), 10_000):
            await protocol.send(
                writer, "fileWant", self.epochs.epoch, {"names": missing[start : start + 10_000]}
            )

    async def _give_back(self, writer: asyncio.StreamWriter, names: list[str]) -> None:
        """Send the primary the job files it lacks that are here (stored by this candidate
        while it was primary, and not replicated before the failover)."""
        if self.space is None:
            return
        for name in names[:100_000]:
            if not name.startswith(replicated_names.FILES):
                continue
            try:
                path = self.space.path_of(name)
            except XceError:
                continue
            if path is None or await hafiles.send_put(writer, self.epochs.epoch, name, path) < 0:
                continue
            log.info("sent job file %s back to the primary, which lacked it", name[6:])

    async def _file(self, writer: asyncio.StreamWriter, body: dict[str, object]) -> None:
        """One file operation, durable before its ticket is acknowledged."""
        if self.receiver is None:
            return
        try:
            fits = await asyncio.to_thread(self.receiver.apply, body)
        except XceError as exc:
            raise protocol.ProtocolError(f"bad file operation: {exc.message}") from None
        if not fits:
            await protocol.send(
                writer, "fileWant", self.epochs.epoch, {"names": [replicated_names.AUDIT]}
            )
        if body.get("ticket") and body.get("last"):
            await protocol.send(writer, "fileAck", self.epochs.epoch, {"ticket": body["ticket"]})

    async def _apply(self, first_seq: int, data: bytes) -> list[Event]:
        """Check, apply and log one batch of records, all or nothing: every frame is
        verified and decoded and the events are tried on a scratch state before any of
        them changes the state or reaches the log."""
        writer = self.store.writer
        if first_seq != writer.next_seq:
            raise Diverged(f"records start at {first_seq}, expected {writer.next_seq}")
        batch: list[tuple[int, bytes, Event]] = []
        try:
            for fr in read_frames(data):
                seq, epoch, event = decode_entry(fr.payload)
                if seq != writer.next_seq + len(batch):
                    raise Diverged(
                        f"record {seq} arrived where {writer.next_seq + len(batch)} belongs"
                    )
                batch.append((epoch, data[fr.offset : fr.end], event))
        except (CorruptRecord, WireError) as exc:
            raise protocol.ProtocolError(f"bad WAL record in the stream: {exc}") from None
        # The state and the observers (the standby's own accounting copy) of our log
        applier = self.store.applier
        try:
            if len(batch) > 1:
                applier.state.check([event for _, _, event in batch])
            for epoch, record, event in batch:
                # one event alone is all-or-nothing in apply itself
                applier.apply(event, writer.next_seq)
                self.store.append(record, epoch)
                self.last_epoch = epoch
                self.last_crc = FRAME_HEADER.unpack_from(record, 0)[1]
        except XceError as exc:
            self.want_snapshot = True
            raise CannotApply(
                f"records {first_seq}..{first_seq + len(batch) - 1} do not apply here "
                f"({exc.message}): asking the primary for a checkpoint transfer"
            ) from None
        await writer.sync(durable=True)
        applier.durable(writer.next_seq - 1)
        return [event for _, _, event in batch]

    async def _install_snapshot(self, seq: int, data: bytes) -> None:
        """Start over from the primary's checkpoint: our own log is replaced, not merged."""
        await self.stop_checkpoints()
        await self.store.writer.close()
        held, held_epoch = self.durable_seq, self.last_epoch
        ckpt = checkpoint_dir(self.state_dir)
        ckpt.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = ckpt / f".incoming-{secrets.token_hex(4)}.tmp"

        def install() -> None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            for _, path in list_segments(wal_dir(self.state_dir)):
                path.unlink()
            for _, path in list_checkpoints(ckpt):
                path.unlink()
            os.replace(tmp, ckpt / checkpoint_name(seq))
            fsync_dir(ckpt)
            fsync_dir(wal_dir(self.state_dir))

        await asyncio.get_running_loop().run_in_executor(None, install)
        self.store = DurableLog.open(self.state_dir, self.settings)
        self.last_epoch = self.store.recovered.last_epoch
        self.want_snapshot = False
        self.last_crc = None
        self.start_checkpoints()
        log.warning(
            "installed the primary's checkpoint at record %d (%d jobs); this "
            "standby's own log (records 1..%d, last of epoch %d) was discarded",
            seq,
            len(self.state.jobs),
            held,
            held_epoch,
        )

    def _write_auth_files(self, files: list[tuple[str, bytes]]) -> None:
        folder = key_dir(self.state_dir)
        private_dir(folder)
        for name, data in files:
            if "/" in name or name.startswith("."):
                continue
            path = folder / name
            if not path.exists() or path.read_bytes() != data:
                atomic_write(path, data, 0o600)

    async def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
        await self.stop_checkpoints()
        await self.store.close(self.state)


def last_record_crc(state_dir: Path, last_seq: int) -> int | None:
    """The CRC of record `last_seq` read back from the WAL; None if it is not there (the
    log ends at a checkpoint, or is empty)."""
    segments = list_segments(wal_dir(state_dir))
    if not segments or last_seq < segments[-1][0]:
        return None
    first, path = segments[-1]
    crc, seq = None, first - 1
    with mapped(path) as data:  # the frames only (no decoding), the zeros after not touched
        try:
            for offset, _end, _payload in iter_frames(data, records_start(data, path)):
                seq += 1
                crc = FRAME_HEADER.unpack_from(data, offset)[1]
        except CorruptRecord:
            return None
    return crc if seq == last_seq else None
