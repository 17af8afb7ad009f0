"""What the replication source keeps: one session per standby, and the source's own state.

`SourceBase` holds what xce/ha/source.py's `ReplicationSource` and its parts (backlog.py,
shipping.py, acks.py, greeting.py) share: the log, the epochs, the sessions, the waiters of
sync mode, and the alert when sync mode degrades. The WAL writer hands it every durable group
(`on_durable`), kept in a ring of the newest `RING_BYTES` for the links to send.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xce.core.state import ClusterState
from xce.ha import files as hafiles
from xce.ha.epochs import EpochStore
from xce.store.durable import DurableLog
from xce.telemetry import metrics

log = logging.getLogger("xce.ha.source")
RING_BYTES = 64 * 1024 * 1024


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


class SourceBase:
    """The state of a primary's replication source (xce/ha/source.py)."""

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

    def _degrade(self, why: str) -> None:
        if not self.degraded:
            self.degraded = True
            metrics.SYNC_DEGRADED.inc()
            log.error(
                "ALERT: sync replication degraded to async: %s; acknowledged changes "
                "may be lost if this primary fails before a standby catches up",
                why,
            )
