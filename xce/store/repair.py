"""Offline WAL inspection and repair for `xce admin wal-check` and `xce admin wal-repair`.

Repair is deliberate data loss decided by an operator: it cuts the log at the first damaged
record and sets every later segment aside, and says exactly how much it removed. What it
removes is kept beside the log as `<segment>.broken` files (the damaged segment copied whole
before the cut, later segments renamed), which recovery ignores; the cut is fsync'd.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from xce.core.errors import Conflict
from xce.core.versions import NewerFormat
from xce.store.checkpoint import CheckpointError, list_checkpoints, read_checkpoint
from xce.store.recovery import checkpoint_dir, cut_segment, wal_dir
from xce.store.wal.reader import WalCorruption, list_segments, scan_wal
from xce.store.wal.writer import fsync_dir


@dataclass
class WalReport:
    segments: int = 0
    records: int = 0
    last_seq: int = 0
    checkpoints: list[str] = field(default_factory=list)
    torn: str | None = None
    corruption: WalCorruption | None = None
    # State a newer build wrote: not damage, and nothing this build may cut or judge.
    newer: list[str] = field(default_factory=list)

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
        except NewerFormat as exc:
            report.checkpoints.append(f"{path.name}: not read ({exc.message})")
            report.newer.append(exc.message)
    report.segments = len(list_segments(wal_dir(state_dir)))
    try:
        scan = scan_wal(wal_dir(state_dir))
    except NewerFormat as exc:
        report.newer.append(exc.message)
        return report
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
        if report.newer:
            # Records this build cannot read are not damaged records: never cut them.
            raise Conflict(f"{report.newer[0]}; nothing was cut")
        if report.corruption is None:
            return [
                "the WAL has no damage in the middle; nothing to repair"
                + (
                    f" (a torn tail, {report.torn}, is cut on the next start)"
                    if report.torn
                    else ""
                )
            ]
        damaged = report.corruption.segment
        offset = report.corruption.offset
        done = []
        size = damaged.stat().st_size
        kept = _broken_name(damaged)
        _durable_copy(damaged, kept)
        later = [p for _, p in list_segments(wal_dir(state_dir)) if p.name > damaged.name]
        cut_segment(damaged, offset)
        done.append(
            f"cut {damaged.name} at byte {offset} (removed {size - offset} bytes; "
            f"the whole segment is kept as {kept.name})"
        )
        for path in later:
            aside = _broken_name(path)
            os.replace(path, aside)
            done.append(f"set aside {path.name} ({aside.stat().st_size} bytes) as {aside.name}")
        fsync_dir(damaged.parent)
        return done
    finally:
        os.close(fd)


def _broken_name(path: Path) -> Path:
    """`<name>.broken`, or `.broken.1`, ... when an earlier repair kept one already."""
    candidate = path.with_name(path.name + ".broken")
    n = 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.broken.{n}")
    return candidate


def _durable_copy(source: Path, target: Path) -> None:
    """Copy `source` to `target` (0600) and fsync it before anything is cut."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
