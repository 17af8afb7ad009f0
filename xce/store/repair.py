"""Offline WAL inspection and repair for `xce admin wal-check` and `xce admin wal-repair`.

Repair is deliberate data loss decided by an operator: it cuts the log at the first damaged
record and removes every later segment, and says exactly how much it removed.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from xce.core.errors import Conflict
from xce.store.checkpoint import CheckpointError, list_checkpoints, read_checkpoint
from xce.store.recovery import checkpoint_dir, wal_dir
from xce.store.wal.reader import WalCorruption, list_segments, scan_wal


@dataclass
class WalReport:
    segments: int = 0
    records: int = 0
    last_seq: int = 0
    checkpoints: list[str] = field(default_factory=list)
    torn: str | None = None
    corruption: WalCorruption | None = None

    @property
    def healthy(self) -> bool:
        return self.corruption is None


def lock_state_dir(state_dir: Path) -> int:
    """Hold an exclusive lock on the state directory for this process's lifetime."""
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Conflict(
            f"another controller is using {state_dir} (it holds {state_dir}/lock)"
        ) from None
    return fd


def check(state_dir: Path) -> WalReport:
    report = WalReport()
    for seq, path in list_checkpoints(checkpoint_dir(state_dir)):
        try:
            _header, state = read_checkpoint(path)
            report.checkpoints.append(f"{path.name}: ok, {len(state.jobs)} jobs at record {seq}")
        except CheckpointError as exc:
            report.checkpoints.append(f"{path.name}: DAMAGED ({exc})")
    report.segments = len(list_segments(wal_dir(state_dir)))
    try:
        scan = scan_wal(wal_dir(state_dir))
    except WalCorruption as exc:
        report.corruption = exc
        return report
    report.records = scan.records
    report.last_seq = scan.last_seq
    if scan.torn:
        report.torn = f"{scan.torn.segment.name} at byte {scan.torn.offset} ({scan.torn.why})"
    return report


def repair(state_dir: Path) -> list[str]:
    """Cut the WAL at its first damage; returns what was done, line by line."""
    fd = lock_state_dir(state_dir)
    try:
        report = check(state_dir)
        if report.corruption is None:
            return ["the WAL has no damage in the middle; nothing to repair"
                    + (f" (a torn tail, {report.torn}, is cut on the next start)"
                       if report.torn else "")]
        damaged = report.corruption.segment
        offset = report.corruption.offset
        done = []
        size = damaged.stat().st_size
        os.truncate(damaged, offset)
        done.append(f"cut {damaged.name} at byte {offset} (removed {size - offset} bytes)")
        later = [p for _, p in list_segments(wal_dir(state_dir)) if p.name > damaged.name]
        for path in later:
            done.append(f"removed {path.name} ({path.stat().st_size} bytes)")
            path.unlink()
        return done
    finally:
        os.close(fd)
