"""What the replication source's parts share: one session per standby, and the source's own
settings and state.

`SourceShared` is handed to each part of xce/ha/source.py's `ReplicationSource` (backlog.py,
shipping.py, acks.py, greeting.py): the log, the epochs, the sessions, the mode, the files
beside the records, and the alert when sync mode degrades.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xce.core.errors import Unavailable
from xce.core.state import ClusterState
from xce.ha import files as hafiles
from xce.ha.epochs import EpochStore
from xce.ha.lagbound import LagBound
from xce.store.durable import DurableLog
from xce.telemetry import metrics

log = logging.getLogger("xce.ha.source")


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
    release: str = ""  # the standby's build (its hello; "" before versions were sent)
    file_progress: float = 0.0  # monotonic time the last file piece left for it


class SourceShared:
    """The state every part of a primary's replication source reads: the sessions table,
    the log and epochs, the mode and its timeouts, the files (None: records only), and
    whether sync mode has degraded."""

    def __init__(
        self,
        store: DurableLog,
        epochs: EpochStore,
        state: ClusterState,
        mode: str,
        sync_timeout_s: float,
        heartbeat_s: float,
        on_higher_epoch: Callable[[int], None],
        space: hafiles.FileSpace | None,
        bound: LagBound | None = None,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.state = state
        self.mode = mode
        self.sync_timeout_s = sync_timeout_s
        self.heartbeat_s = heartbeat_s
        self.on_higher_epoch = on_higher_epoch
        self.space = space  # None: no files beside the records (tests of the log alone)
        self.sessions: dict[str, StandbySession] = {}
        # Standbys refused for their versions (greeting.py): node -> what the status shows
        self.incompatible: dict[str, dict[str, object]] = {}
        self.degraded = False
        self.bound = bound  # async mode's bound on a standby's lag (lagbound.py)

    @property
    def durable_seq(self) -> int:
        return self.store.writer.durable_seq

    def wake_all(self) -> None:
        for session in self.sessions.values():
            session.wake.set()

    def degrade(self, why: str) -> None:
        """No standby confirms in time: acknowledge without it (sync mode degrades to
        async, async mode lifts its lag bound) until one is caught up again."""
        if not self.degraded:
            self.degraded = True
            if self.mode == "sync":
                metrics.SYNC_DEGRADED.inc()
            what = (
                "sync replication degraded to async"
                if self.mode == "sync"
                else "async replication's lag bound is lifted"
            )
            log.error(
                "ALERT: %s: %s; acknowledged changes may be lost if this primary fails "
                "before a standby catches up",
                what,
                why,
            )


def stepped_down() -> Unavailable:
    """What a commit (or file operation) still waiting for a standby gets when the source
    closes: it was never confirmed."""
    return Unavailable(
        "the primary stepped down before a standby confirmed this change: it may "
        "or may not survive, so check before retrying"
    )
