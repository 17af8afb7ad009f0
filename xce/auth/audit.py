"""The audit log: who did what to which object, as append-only JSON lines in the state dir.

Each record is one line `{"ts", "user", "action", "object", "outcome", "detail", "remote"}`
appended with `O_APPEND` (a single `write`, so lines never interleave) and fdatasync'd before
the request that caused it is answered. Records that arrive while a write is under way go
together in the next one (group commit, as the WAL does): every submission is recorded, and a
line and an fdatasync each would make the audit trail the submit path's bottleneck.

One exception follows the WAL's own policy: with `relaxed_s` set (the controller sets it to
`wal_fsync_interval_s` under `wal_fsync = "interval"`), a record passed `durable=False` (an
accepted submission, whose job is itself only durable within that interval) is answered at
once and written, with whatever else waits, within `relaxed_s` seconds, at the latest when a
strict record arrives, on `flush()` (reads of the log, shutdown) or at the next group. A crash
can then lose the same window of submission records as of the submissions themselves, never a
record of a job that survived it by more than that window; refusals, failures and every other
action stay durable before their answer. A line torn
by a crash is ended before the next record and skipped when reading, so it never swallows a
later record. Nothing rewrites or truncates the file; admins read it through `GET /api/v1/audit`
(filters + paging) or `xce admin audit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("xce.audit")


@dataclass(frozen=True)
class AuditQuery:
    user: str | None = None
    action: str | None = None  # a prefix: "job" matches job.kill, job.stop ...
    object: str | None = None
    outcome: str | None = None
    since: float | None = None
    offset: int = 0
    limit: int = 100


class AuditLog:
    def __init__(self, path: Path, relaxed_s: float | None = None) -> None:
        self.path = path
        self.relaxed_s = relaxed_s  # None: every record is durable before its answer
        self._lock = threading.Lock()
        # Lines waiting for the next group write, with the futures of their requests (None:
        # a relaxed record, answered already).
        self._waiting: list[tuple[bytes, asyncio.Future[None] | None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._strict = asyncio.Event()  # a waiting record is strict: write without delay
        # Called on the loop after each record: the replication source sends the new lines
        # to the standbys (xce/ha/files.py).
        self.on_append: Callable[[], None] | None = None

    def _append(self, line: bytes) -> None:
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # a torn line from a crash: end it, keep this one
                os.write(fd, line)
                os.fdatasync(fd)
            finally:
                os.close(fd)

    async def record(
        self,
        user: str,
        action: str,
        obj: str,
        outcome: str,
        detail: str = "",
        remote: str = "",
        durable: bool = True,
    ) -> None:
        """Append one record durably (in a thread: fdatasync must not stall the loop);
        `durable=False` under a relaxed policy: return at once, written within `relaxed_s`."""
        entry = {
            "ts": round(time.time(), 3),
            "user": user,
            "action": action,
            "object": obj,
            "outcome": outcome,
            "detail": detail,
            "remote": remote,
        }
        line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
        if not durable and self.relaxed_s is not None:
            self._waiting.append((line, None))
            self._start()
            return
        await self._wait_written(line)

    async def flush(self) -> None:
        """Return once every record accepted so far is written and fdatasync'd (reads of
        the log see relaxed records; shutdown loses none)."""
        if self._waiting or (self._writer is not None and not self._writer.done()):
            await self._wait_written(b"")

    async def _wait_written(self, line: bytes) -> None:
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((line, done))
        self._strict.set()
        self._start()
        await done

    def _start(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_groups())

    async def _write_groups(self) -> None:
        """Write what is waiting as one append (one fdatasync), until nothing waits; each
        request is answered once its own line is durable, or gets the write's error. While
        only relaxed records wait, wait up to `relaxed_s` for more (or a strict one) first."""
        while self._waiting:
            if self.relaxed_s is not None and all(done is None for _, done in self._waiting):
                self._strict.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._strict.wait(), self.relaxed_s)
            group, self._waiting = self._waiting, []
            try:
                await asyncio.to_thread(self._append, b"".join(line for line, _ in group))
            except Exception as exc:
                lost = sum(1 for _, done in group if done is None)
                if lost:
                    log.error("%d audit records not written to %s: %s", lost, self.path, exc)
                for _, done in group:
                    if done is not None and not done.done():
                        done.set_exception(exc)
                continue
            for _, done in group:
                if done is not None and not done.done():
                    done.set_result(None)
            if self.on_append is not None:
                self.on_append()

    def _entries(self) -> Iterator[dict[str, Any]]:
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return
        with f:
            for raw in f:
                try:
                    yield json.loads(raw)
                except ValueError:
                    continue  # a torn last line after a crash is skipped, not fatal

    def query(self, q: AuditQuery) -> tuple[list[dict[str, Any]], int]:
        """Matching records, oldest first, and how many matched in all."""
        rows: list[dict[str, Any]] = []
        total = 0
        for entry in self._entries():
            if q.user and entry.get("user") != q.user:
                continue
            if q.action and not str(entry.get("action", "")).startswith(q.action):
                continue
            if q.object and entry.get("object") != q.object:
                continue
            if q.outcome and entry.get("outcome") != q.outcome:
                continue
            if q.since is not None and entry.get("ts", 0) < q.since:
                continue
            if q.offset <= total < q.offset + q.limit:
                rows.append(entry)
            total += 1
        return rows, total
