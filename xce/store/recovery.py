"""Recovery: the newest checkpoint that verifies, then every WAL record after it.

This is the same code path as live operation (`ClusterState.apply`), so a recovered state is
the state the controller had when its last record reached the disk.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from xce.core.applier import Applier, Observer
from xce.core.errors import XceError
from xce.core.events import Event
from xce.core.state import ClusterState
from xce.store.checkpoint import CheckpointError, list_checkpoints, read_checkpoint
from xce.store.wal.reader import WalCorruption, WalScan, list_segments, records_start, scan_wal
from xce.store.wal.writer import fsync_dir

log = logging.getLogger("xce.recovery")


@dataclass
class Recovered:
    state: ClusterState
    last_seq: int
    checkpoint_seq: int
    replayed: int
    seconds: float
    torn: str | None
    last_epoch: int = 0  # of the last record (the checkpoint's, if the WAL adds none)


class ReplayError(XceError):
    code = "replay_error"


def wal_dir(state_dir: Path) -> Path:
    return state_dir / "wal"


def checkpoint_dir(state_dir: Path) -> Path:
    return state_dir / "checkpoints"


def recover(
    state_dir: Path, repair_torn_tail: bool = True, observers: Iterable[Observer] = ()
) -> Recovered:
    """The state of `state_dir`; `observers` (the accounting feed) see every replayed
    event, as they saw it live, and then `recovered`."""
    started = time.perf_counter()
    for leftover in checkpoint_dir(state_dir).glob(".checkpoint-*.tmp"):
        leftover.unlink(missing_ok=True)  # a checkpoint a crash interrupted
    state = ClusterState()
    checkpoint_seq = 0
    checkpoint_epoch = 0
    for seq, path in list_checkpoints(checkpoint_dir(state_dir)):
        try:
            header, state = read_checkpoint(path)
            checkpoint_seq = seq
            checkpoint_epoch = int(header["epoch"])
            break
        except CheckpointError as exc:
            log.warning("checkpoint %s does not verify, trying an older one: %s", path.name, exc)
    replayed = 0
    first: list[int] = []
    applier = Applier(state, observers)

    def apply(seq: int, event: Event) -> None:
        nonlocal replayed
        if not first:
            first.append(seq)
            if seq != checkpoint_seq + 1:
                raise ReplayError(
                    f"the WAL resumes at record {seq} but the checkpoint ends at "
                    f"{checkpoint_seq}: records {checkpoint_seq + 1}..{seq - 1} are missing"
                )
        try:
            applier.begin(event)
        except XceError as exc:
            raise ReplayError(f"WAL record {seq} does not apply: {exc.message}") from None
        applier.finish(event, seq)
        replayed += 1

    scan: WalScan = scan_wal(wal_dir(state_dir), checkpoint_seq, apply)
    torn = None
    if scan.torn is not None:
        torn = f"{scan.torn.segment.name} at byte {scan.torn.offset} ({scan.torn.why})"
        if not repair_torn_tail:
            raise WalCorruption(scan.torn.segment, scan.torn.offset, scan.torn.why)
        log.warning("WAL tail was torn by a crash: cut %s (never acknowledged)", torn)
        cut_segment(scan.torn.segment, scan.torn.offset)
    _drop_empty_tail(wal_dir(state_dir))
    last = max(scan.last_seq, checkpoint_seq)
    state.applied = last
    applier.recovered(checkpoint_seq, last)
    last_epoch = scan.last_epoch if scan.last_seq > checkpoint_seq else checkpoint_epoch
    return Recovered(
        state, last, checkpoint_seq, replayed, time.perf_counter() - started, torn, last_epoch
    )


def cut_segment(path: Path, offset: int) -> None:
    """Truncate a segment and make the cut durable (file, then directory)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def _drop_empty_tail(directory: Path) -> None:
    """A last segment with no records (created, never written, or holding only its header
    after a torn first write was cut) would clash by name."""
    segments = list_segments(directory)
    if not segments:
        return
    _, path = segments[-1]
    with path.open("rb") as f:
        data = f.read(4096)  # not the whole (preallocated, 64 MiB) segment
    start = records_start(data, path)
    if not any(data[start : start + 8]):
        path.unlink()
