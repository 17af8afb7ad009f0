"""A standby connecting: its credentials, where its log ends, and whether that log is a
prefix of this primary's (else it gets the newest checkpoint first, then the WAL after it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xce.core.errors import Unauthorized
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.backlog import Backlog
from xce.ha.sessions import SourceShared, StandbySession
from xce.ha.shipping import FileShipping
from xce.store import replicated_names
from xce.store.checkpoint import list_checkpoints
from xce.store.recovery import checkpoint_dir

log = logging.getLogger("xce.ha.source")
SNAPSHOT_CHUNK = 4 * 1024 * 1024


class Greeting:
    """The `hello` / `welcome` exchange and what a new or diverged standby is sent first:
    its log is checked against `backlog`, and its session starts after the file operations
    `files` queued so far."""

    def __init__(
        self,
        shared: SourceShared,
        backlog: Backlog,
        files: FileShipping,
        auth_dir: Path,
        verify_token: Callable[[str], None],
    ) -> None:
        self.shared = shared
        self.backlog = backlog
        self.files = files
        self.auth_dir = auth_dir
        self.verify_token = verify_token

    async def _refuse(self, writer: asyncio.StreamWriter, why: str) -> None:
        with contextlib.suppress(Exception):
            await protocol.send(writer, "refuse", self.shared.epochs.epoch, why)

    async def greet(
        self, hello: protocol.Message, peer: str, writer: asyncio.StreamWriter
    ) -> StandbySession | None:
        if hello.kind != "hello":
            raise protocol.ProtocolError(f"expected hello, got {hello.kind}")
        if not await self._admitted(hello, peer, writer):
            return None
        node = hello.body["node"] or peer
        if not await self._compatible(hello.body, node, peer, writer):
            return None
        last_seq = hello.body["lastSeq"]
        snapshot = await self._needs_snapshot(node, hello.body)
        session = await self._open_session(node, peer, writer, snapshot, hello.body)
        history = [n for pair in self.shared.epochs.history for n in pair]
        start = last_seq + 1
        snapshot_path: Path | None = None
        if snapshot:
            seq, snapshot_path = await self._newest_checkpoint()
            start = seq + 1
        await protocol.send(
            writer,
            "welcome",
            self.shared.epochs.epoch,
            {
                "startSeq": start,
                "snapshot": snapshot,
                "mode": self.shared.mode,
                "history": history,
                "files": self.shared.space is not None,
                **protocol.versions(),
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

    async def _admitted(
        self, hello: protocol.Message, peer: str, writer: asyncio.StreamWriter
    ) -> bool:
        """The standby's token is good and it knows no newer term (else it is refused)."""
        try:
            self.verify_token(hello.body["token"])
        except Unauthorized as exc:
            log.warning("replication peer %s refused: %s", peer, exc.message)
            await self._refuse(writer, exc.message)
            return False
        if hello.epoch > self.shared.epochs.epoch:  # a trusted candidate knows a newer term
            await self._refuse(
                writer, f"stale primary: epoch {self.shared.epochs.epoch} < {hello.epoch}"
            )
            self.shared.on_higher_epoch(hello.epoch)
            return False
        return True

    async def _compatible(
        self, hello: dict[str, Any], node: str, peer: str, writer: asyncio.StreamWriter
    ) -> bool:
        """The standby reads what this primary writes, within the skew rule; otherwise it
        is refused with one line naming both builds and listed as incompatible (its
        reconnects are refused the same way until it is upgraded)."""
        why = protocol.cannot_serve(hello, node)
        if why is None:
            self.shared.incompatible.pop(node, None)
            return True
        if node not in self.shared.incompatible:
            log.error("replication refused: %s", why)
        self.shared.incompatible[node] = {
            "node": node,
            "peer": peer,
            "release": str(hello.get("release") or ""),
            "incompatible": why,
        }
        await self._refuse(writer, protocol.INCOMPATIBLE + why)
        return False

    async def _needs_snapshot(self, node: str, hello: dict[str, Any]) -> bool:
        """Whether the standby gets a checkpoint first: it asked, its log diverged from
        ours (logged at ERROR with the records it discards), or it is behind our WAL."""
        last_seq, last_epoch = hello["lastSeq"], hello["lastEpoch"]
        diverged = await self._diverged(hello)
        snapshot = (
            bool(hello.get("wantSnapshot"))  # a record did not apply on the standby
            or diverged is not None
            or last_seq + 1 < self.backlog.first_on_disk()
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
        return snapshot

    async def _open_session(
        self,
        node: str,
        peer: str,
        writer: asyncio.StreamWriter,
        snapshot: bool,
        hello: dict[str, Any],
    ) -> StandbySession:
        """The standby's new session (replacing an older link of the same node)."""
        old = self.shared.sessions.pop(node, None)
        if old is not None and old.writer is not None:
            old.writer.close()
        session = StandbySession(
            node,
            peer,
            writer=writer,
            snapshot=snapshot,
            acked_seq=0 if snapshot else hello["lastSeq"],
            release=str(hello.get("release") or ""),
        )
        await self._greet_files(session, hello)
        session.sent_seq = session.acked_seq
        # From here on (no await in between) every file queued reaches this standby.
        session.first_ticket = self.files.ticket + 1
        self.shared.sessions[node] = session
        return session

    async def _greet_files(self, session: StandbySession, hello: dict[str, Any]) -> None:
        """Where this standby's audit log stands against ours, and the users file."""
        if self.shared.space is None or not hello.get("files"):
            session.files_ok = False  # a standby of an older version: records only
            return
        size = int(hello.get("auditSize") or 0)
        sha = bytes(hello.get("auditSha") or b"")
        session.audit_sent = 0
        if size:
            path = self.shared.space.audit_path
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
        if self.shared.space.users_path is not None and self.shared.space.users_path.is_file():
            session.files.append((0, replicated_names.USERS, "put"))

    def _common_end(self, last_seq: int, last_epoch: int) -> int:
        """The last record the standby's log may share with ours (for the log line)."""
        first = self.shared.epochs.first_of(last_epoch)
        end = self.shared.epochs.end_of(last_epoch)
        if first is None:
            return 0
        return min(last_seq, end if end is not None else last_seq) if first <= last_seq else 0

    async def _diverged(self, hello: dict[str, Any]) -> str | None:
        """Why the standby's log is not a prefix of ours, or None once it is verified.

        Three checks: (epoch, seq) against our history (a tail past the end of its epoch
        here), the standby's epoch history against ours (every term it holds records of
        must have begun at the same record here), and content: the CRC of its last record
        against ours at that position. The last one tells two different tails of one epoch
        apart. A standby whose log cannot be verified gets a checkpoint."""
        last_seq = int(hello["lastSeq"])
        last_epoch = int(hello["lastEpoch"])
        if last_seq == 0:
            return None
        if last_seq > self.shared.durable_seq:
            return f"it holds record {last_seq}, past this primary's end {self.shared.durable_seq}"
        end = self.shared.epochs.end_of(last_epoch)
        if end is not None and last_seq > end:
            return f"epoch {last_epoch} ended at record {end} here"
        flat = list(hello.get("history") or [])
        mine = dict(self.shared.epochs.history)
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
        crc = await self.backlog.record_crc(last_seq)
        if crc is None:
            return f"record {last_seq} cannot be read here to compare"
        if crc != hello.get("lastCrc"):
            return (
                f"record {last_seq} differs in content (crc {hello.get('lastCrc'):08x}, "
                f"here {crc:08x})"
            )
        return None

    async def _newest_checkpoint(self) -> tuple[int, Path]:
        found = list_checkpoints(checkpoint_dir(self.shared.store.state_dir))
        if not found:
            await self.shared.store.checkpoint(self.shared.state)
            found = list_checkpoints(checkpoint_dir(self.shared.store.state_dir))
        return found[0]

    async def _send_snapshot(self, writer: asyncio.StreamWriter, path: Path, seq: int) -> None:
        # Read whole before sending: the checkpoint may be pruned by a newer one meanwhile.
        data = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
        for start in range(0, max(len(data), 1), SNAPSHOT_CHUNK):
            piece = data[start : start + SNAPSHOT_CHUNK]
            await protocol.send(
                writer,
                "snapshotChunk",
                self.shared.epochs.epoch,
                {"seq": seq, "data": piece, "last": start + SNAPSHOT_CHUNK >= len(data)},
            )

    def auth_files(self) -> list[tuple[str, bytes]]:
        if not self.auth_dir.is_dir():
            return []
        return sorted(
            (p.name, p.read_bytes())
            for p in self.auth_dir.iterdir()
            if p.is_file() and not p.name.startswith(".")
        )

    async def _send_auth_files(self, writer: asyncio.StreamWriter) -> list[tuple[str, bytes]]:
        files = self.auth_files()
        await protocol.send(writer, "authFiles", self.shared.epochs.epoch, files)
        return files
