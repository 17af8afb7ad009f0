"""Files beside the records (xce/ha/files.py), the primary's side: shipping operations to
standbys in order with the records, the audit log's growth, job files a standby returns
after a failover, and sync mode's wait for a standby to hold a file.
"""

from __future__ import annotations

import asyncio
import logging
import time

from xce.core.errors import XceError
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.sessions import SourceShared, StandbySession, stepped_down
from xce.store import replicated_names

log = logging.getLogger("xce.ha.source")


class FileShipping:
    """File operations for every connected standby, and the ones they send back."""

    def __init__(self, shared: SourceShared) -> None:
        self.shared = shared
        self.ticket = 0  # the last file operation queued
        self._file_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._receiver: hafiles.Receiver | None = None  # files a standby returns
        self._skipping: set[str] = set()  # returned files that are here after all
        self._warned_files = False

    def ship(self, ops: list[tuple[str, str]]) -> int:
        """Queue file operations (name, "put" | "drop" | "move:<source>") for every
        connected standby, in order with the records: call it before the commit whose
        records name the files. Returns the ticket to wait for (`wait_files`)."""
        if self.shared.space is None or not ops:
            return 0
        for name, op in ops:
            self.ticket += 1
            for session in self.shared.sessions.values():
                session.files.append((self.ticket, name, op))
        for session in self.shared.sessions.values():
            session.wake.set()
        return self.ticket

    def wake_files(self) -> None:
        """The audit log grew: let idle links send the new lines."""
        for session in self.shared.sessions.values():
            session.wake.set()

    async def send_files(self, session: StandbySession, writer: asyncio.StreamWriter) -> None:
        """The file operations queued for this standby, then the audit log's new lines."""
        epoch = self.shared.epochs.epoch
        await self._send_file_ops(session, writer, epoch)
        if session.audit_sent is not None:
            await self._send_audit(session, writer, epoch)

    async def _send_file_ops(
        self, session: StandbySession, writer: asyncio.StreamWriter, epoch: int
    ) -> None:
        assert self.shared.space is not None
        while session.files:
            ticket, name, op = session.files.popleft()
            path = self.shared.space.path_of(name)
            sent = -1
            if op.startswith(replicated_names.MOVE):
                if (
                    op[len(replicated_names.MOVE) :] in session.uploads
                ):  # it has the upload: move it
                    session.uploads.discard(op[len(replicated_names.MOVE) :])
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
                if sent >= 0 and name.startswith(replicated_names.FILES + "uploads/"):
                    session.uploads.add(name)
            if sent < 0:  # gone meanwhile (or dropped): the standby drops it too
                await protocol.send(
                    writer,
                    "fileData",
                    epoch,
                    {"ticket": ticket, "name": name, "op": "drop", "last": True},
                )

    async def _send_audit(
        self, session: StandbySession, writer: asyncio.StreamWriter, epoch: int
    ) -> None:
        """The audit log from what this standby holds (whole again if its copy differs)."""
        assert self.shared.space is not None and session.audit_sent is not None
        loop = asyncio.get_running_loop()
        path = self.shared.space.audit_path
        if session.audit_replace:
            session.audit_replace = False
            session.audit_sent = max(
                await hafiles.send_put(writer, epoch, replicated_names.AUDIT, path), 0
            )
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
                    "name": replicated_names.AUDIT,
                    "op": "append",
                    "offset": session.audit_sent,
                    "data": data,
                    "last": True,
                },
            )
            session.audit_sent += len(data)

    async def want_back(self, writer: asyncio.StreamWriter) -> None:
        """Ask a standby that just connected for the job files our records name that are
        not here (stored by it while it was primary, not replicated before a failover)."""
        if self.shared.space is None:
            return
        missing = await hafiles.missing_in_state(self.shared.space, self.shared.state)
        missing = [n for n in missing if n.startswith(replicated_names.FILES)]
        for start in range(0, len(missing), 10_000):
            await protocol.send(
                writer,
                "fileWant",
                self.shared.epochs.epoch,
                {"names": missing[start : start + 10_000]},
            )

    async def take_back(self, session: StandbySession, body: dict[str, object]) -> None:
        """A job file a standby sends because we asked (`want_back`): stored only if it is
        still missing here, so a standby never overwrites the primary's own files."""
        assert self.shared.space is not None
        name = str(body["name"])
        if not name.startswith(replicated_names.FILES) or body.get("op") != "put":
            raise protocol.ProtocolError(f"a standby may only return job files, not {name!r}")
        if self._receiver is None:
            self._receiver = hafiles.Receiver(self.shared.space)
        path = self.shared.space.path_of(name)
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

    def on_want(self, session: StandbySession, names: list[str]) -> None:
        assert self.shared.space is not None
        for name in names[:100_000]:
            try:
                self.shared.space.path_of(name)
            except XceError:
                log.warning(
                    "standby %s asked for %r, not a replicated file: ignored",
                    session.node,
                    name[:200],
                )
                continue
            if name == replicated_names.AUDIT:
                session.audit_sent, session.audit_replace = 0, True
            else:
                session.files.append((0, name, "put"))
        session.wake.set()

    def release_files(self) -> None:
        keep = []
        for ticket, fut in self._file_waiters:
            if any(
                s.in_sync and s.files_ok and s.first_ticket <= ticket <= s.acked_ticket
                for s in self.shared.sessions.values()
            ):
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((ticket, fut))
        self._file_waiters = keep

    def fail_waiters(self) -> None:
        """The source is closing: no file operation still waited for is confirmed."""
        for _, fut in self._file_waiters:
            if not fut.done():  # never acknowledge what no standby confirmed
                fut.set_exception(stepped_down())
        self._file_waiters = []

    async def wait_files(self, ticket: int) -> None:
        """Sync mode: return once an in-sync standby that was connected when `ticket` was
        queued has made it durable, or degrade to async after `sync_timeout_s`."""
        if self.shared.mode != "sync" or ticket == 0:
            return
        if not any(
            s.in_sync and s.files_ok and s.first_ticket <= ticket
            for s in self.shared.sessions.values()
        ):
            if not any(s.in_sync for s in self.shared.sessions.values()):
                self.shared.degrade("no standby is connected and caught up (files)")
            elif not self._warned_files and not any(
                s.files_ok for s in self.shared.sessions.values()
            ):
                self._warned_files = True
                log.error(
                    "ALERT: no connected standby takes job files (an older "
                    "version): after a failover jobs may miss their files"
                )
            # else: a standby that connected since; its catch-up asks for these files
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._file_waiters.append((ticket, fut))
        self.release_files()
        try:
            # A large file takes longer than sync_timeout_s to cross: wait while its
            # pieces keep leaving; give up after sync_timeout_s with no progress.
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(fut), self.shared.sync_timeout_s)
                    break
                except TimeoutError:
                    moving = max(
                        (
                            s.file_progress
                            for s in self.shared.sessions.values()
                            if s.files_ok and s.first_ticket <= ticket
                        ),
                        default=0.0,
                    )
                    if time.monotonic() - moving > self.shared.sync_timeout_s:
                        raise
        except TimeoutError:
            self._file_waiters = [(q, f) for q, f in self._file_waiters if f is not fut]
            fut.cancel()
            for s in self.shared.sessions.values():
                if s.files_ok and s.acked_ticket < ticket:
                    s.in_sync = False  # in sync again with its next acknowledgement
            timeout = self.shared.sync_timeout_s
            self.shared.degrade(
                f"no standby acknowledged file operation {ticket} within {timeout:g} s"
            )
