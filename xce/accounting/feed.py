"""The accounting feed: records from applied events to the store, off the request path.

Wherever events are applied (`ControllerService.commit`, recovery, a standby's follower) the
applier calls `before`/`after` around `state.apply`; records are staged there (a dict
append: no I/O). Once the batch is durable in the event WAL, `durable(seq)` hands the staged
records to the writer thread, which stores them in one SQLite transaction. So:

- an acknowledged request never waits for or fails on accounting: a store write that fails
  is logged, counted (`xce_accounting_write_failures`) and retried every few seconds with
  the same records, from the same WAL position; `INSERT OR IGNORE` on (job id, attempt)
  makes every retry and every replay idempotent;
- a crash loses only records the WAL still holds: recovery replays the WAL after the newest
  checkpoint through the same feed, and a store whose position is behind that checkpoint is
  completed from the checkpoint's finished jobs (`catch_up`);
- a standby derives its own copy from the replicated events, so `xce acct` answers the same
  after a failover.

It is an observer of `xce.core.applier.Applier` (`before`, `after`, `durable`,
`recovered`). One feed per controller process, made by `xce controller`
(xce/server/main.py) and handed to every applier: the service's (`ControllerService.
accounting`, by the composition), and recovery's and a standby's follower's
(`StoreSettings.observers`), which are created at different times but must share one
writer.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from xce.accounting import store
from xce.accounting.record import AttemptWatch, Derived, count, expand, finished_records
from xce.core import events as ev
from xce.core.state import ClusterState
from xce.telemetry import metrics

log = logging.getLogger("xce.accounting")

RETRY_S = 2.0
COALESCE_S = 0.2  # how long the writer gathers records before a transaction
BATCH = 5_000  # ... unless this many are waiting
POSITION_S = 5.0  # at most this often a write that only moves the position
PRUNE_EVERY_S = 3600.0


class AccountingFeed:
    """Stages records as events apply and writes them from its own thread once durable."""

    def __init__(
        self,
        state_dir: Path,
        retention_months: int = 0,
        group_of: Callable[[str], str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = store.db_path(state_dir)
        self.retention_months = retention_months
        self.clock = clock
        self.watch = AttemptWatch(group_of)
        # records, and whole-array kills the writer expands into records (CancelledTasks)
        self._staged: list[Derived] = []
        self._queue: deque[tuple[list[Derived], int]] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._flushing = 0  # flush() callers waiting: write at once
        self._queued = 0  # records in _queue
        # The last durable WAL position of a commit that staged nothing (most commits: a
        # submit ends no attempt). Set without the lock, one store on the applying thread;
        # every record staged before it is already in _queue when the writer reads it.
        self._latest = 0
        self._last_write = 0.0
        self._thread: threading.Thread | None = None
        self._stop = False
        self.position = 0  # the WAL position the store has reached
        self.stats = {"written": 0, "failures": 0}
        self.last_error = ""

    # --- on the applying thread ---------------------------------------------------------

    def before(self, state: ClusterState, event: ev.Event) -> None:
        self.watch.before(state, event)

    def after(self, state: ClusterState, event: ev.Event, seq: int) -> None:
        try:
            record = self.watch.after(state, event, seq)
        except Exception:  # a fault here must never fail a commit or a replay
            log.exception("accounting could not derive a record from %s", type(event).__name__)
            return
        if record is not None:
            self._staged.append(record)

    def durable(self, seq: int) -> None:
        """Everything applied up to WAL record `seq` is durable: write its records.

        A batch that ended no attempt only moves the position, written every POSITION_S
        at most (a store a little behind is completed, idempotently, on start): it is one
        attribute store, no lock (a lock per commit was ~1 us of every submit)."""
        staged, self._staged = self._staged, []
        if not staged:
            self._latest = seq
            return
        with self._cond:
            self._queue.append((staged, seq))
            self._queued += count(staged)
            if self._queued >= BATCH:
                self._cond.notify()  # otherwise the writer comes by within COALESCE_S

    def catch_up(self, state: ClusterState, checkpoint_seq: int, last_seq: int) -> None:
        """After recovery: a store behind the checkpoint it started from missed records of
        the events the checkpoint folded in; its finished jobs are what is left of them."""
        if not self.path.exists():
            have = 0
        else:
            try:
                conn = store.connect(self.path)
                try:
                    have = store.position(conn)
                finally:
                    conn.close()
            except sqlite3.Error as exc:
                log.error(
                    "accounting store %s unreadable (%s): completing it from the checkpoint",
                    self.path,
                    exc,
                )
                have = 0
        self.position = have
        if have < checkpoint_seq:
            found = finished_records(state, checkpoint_seq, self.watch.group_of)
            if found:
                log.info(
                    "accounting store at record %d, before the checkpoint at %d: "
                    "completing it with the %d finished jobs the checkpoint holds "
                    "(records it has are not doubled)",
                    have,
                    checkpoint_seq,
                    len(found),
                )
            self._staged[:0] = found
        self.durable(last_seq)

    def recovered(self, state: ClusterState, checkpoint_seq: int, last_seq: int) -> None:
        """Recovery replayed the log through this feed: complete the store (`catch_up`)
        and start the writer."""
        self.catch_up(state, checkpoint_seq, last_seq)
        self.start()

    # --- the writer thread --------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="xce-accounting", daemon=True)
            self._thread.start()

    def backlog(self) -> int:
        return self._queued + count(self._staged)

    def _pending(self) -> bool:
        """Records to store, or a position the store has not reached (under the lock)."""
        return bool(self._queue) or self._latest > self.position

    def _due(self, after: float) -> bool:
        return time.monotonic() - self._last_write >= after

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        last_prune = 0.0
        while True:
            with self._cond:
                # Wake every COALESCE_S (or when BATCH records wait, or for a flush): one
                # transaction per burst of finishing jobs, and no wake-up per commit, which
                # would take the GIL from the event loop once per request.
                while not self._stop and not (
                    self._pending()
                    and (
                        self._flushing
                        or self._queued >= BATCH
                        or self._due(COALESCE_S if self._queued else POSITION_S)
                    )
                ):
                    self._cond.wait(COALESCE_S)
                if not self._pending() and self._stop:
                    break
                batches = list(self._queue)
                # Read under the lock after the queue: any record staged before this
                # position was queued first (same thread, and a queued append takes the lock).
                latest = self._latest
                self._busy = True
            records = [r for batch, _ in batches for r in batch]
            seq = max(batches[-1][1] if batches else 0, latest)
            try:
                if conn is None:
                    conn = store.connect(self.path)
                added = self._insert(conn, records, seq)
                if self.clock() - last_prune > PRUNE_EVERY_S and self.retention_months:
                    gone = store.prune(conn, self.retention_months, self.clock())
                    if gone:
                        log.info("accounting retention removed %d records", gone)
                last_prune = self.clock() if self.retention_months else last_prune
            except (sqlite3.Error, OSError) as exc:
                self.stats["failures"] += 1
                self.last_error = str(exc)
                metrics.ACCT_WRITE_FAILURES.inc()
                log.error(
                    "accounting store write failed (%s): %d records kept, retrying "
                    "from WAL record %d in %.0f s",
                    exc,
                    count(records),
                    batches[0][1] if batches else seq,
                    RETRY_S,
                )
                if conn is not None:
                    conn.close()
                    conn = None
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait(RETRY_S)
                continue
            with self._cond:
                for batch, _ in batches:
                    self._queue.popleft()
                    self._queued -= count(batch)
                self._busy = False
                self._last_write = time.monotonic()
                self.position = max(self.position, seq)
                self._cond.notify_all()
            self.stats["written"] += added
            metrics.ACCT_RECORDS.inc(added)
            metrics.ACCT_BACKLOG.set(self.backlog())
        if conn is not None:
            conn.close()

    def _insert(self, conn: sqlite3.Connection, items: list[Derived], seq: int) -> int:
        """Store `items` in transactions of at most BATCH records; only the last moves the
        position to `seq` (a failure in between is retried whole: inserts are idempotent,
        and the position never passes a record that is not stored)."""
        added = 0
        chunk = []
        for record in expand(items):
            chunk.append(record)
            if len(chunk) >= BATCH:
                added += store.insert(conn, chunk, self.position)
                chunk = []
        return added + store.insert(conn, chunk, seq)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every durable record is stored (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending() or self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._thread is None:
                        return False
                    self._cond.wait(min(left, 0.5))
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
