"""Reading the WAL back: every intact record in order, and a verdict on any damage.

A torn write (`CorruptRecord.torn`: an incomplete frame, or one with a zeroed sector) in the
*last* segment with nothing intact after it is a torn tail: the write was never acknowledged
(its fsync did not return), so it is safe to cut off, with a warning. A complete record that
fails its checksum (a bit flip: it may have been acknowledged), damage anywhere else, a gap
in sequence numbers, or an intact record after the damage means acknowledged records may be
involved: the scan reports corruption and recovery refuses to start until an operator runs
`xce admin wal-repair --yes`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from xce.core.errors import XceError
from xce.core.events import Event
from xce.store.wal.framing import CorruptRecord, has_valid_frame_after, iter_frames
from xce.store.wal.segment import read_header
from xce.wire.codec import WireError, decode_entry
from xce.wire.fast import FAST_REJECTS, peek_entry

SEGMENT = re.compile(r"^wal-(\d{20})\.seg$")


class WalCorruption(XceError):
    """Damage that could involve acknowledged records; the message says how to repair."""

    code = "wal_corruption"

    def __init__(self, segment: Path, offset: int, why: str) -> None:
        super().__init__(
            f"WAL segment {segment.name} is damaged at byte {offset} ({why}); records after it "
            f"may have been acknowledged. Inspect with `xce admin wal-check --state-dir "
            f"{segment.parent.parent}` and, once the loss is understood, cut the log there "
            f"with `xce admin wal-repair --state-dir {segment.parent.parent} --yes` (it keeps "
            f"a .broken copy)."
        )
        self.segment = segment
        self.offset = offset
        self.why = why


@dataclass
class TornTail:
    segment: Path
    offset: int
    why: str


@dataclass
class WalScan:
    """What a scan found: the last sequence number, and a torn tail if any."""

    last_seq: int = 0
    last_epoch: int = 0  # the epoch (primary term) of the last record (xce/ha)
    records: int = 0
    segments: list[Path] = field(default_factory=list)
    torn: TornTail | None = None
    next_expected: int | None = None  # the record the next segment must start with


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[memoryview]:
    """A file's bytes mapped rather than read: a preallocated segment is mostly zeros past
    its end marker, and a scan never touches those pages (reading a 64 MiB segment whole
    costs more than scanning the records in it)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    try:
        yield view
    finally:
        with contextlib.suppress(BufferError):  # a slice still held: closed once collected
            view.release()
            mm.close()


def segment_name(first_seq: int) -> str:
    return f"wal-{first_seq:020d}.seg"


def list_segments(wal_dir: Path) -> list[tuple[int, Path]]:
    if not wal_dir.is_dir():
        return []
    found = []
    for path in wal_dir.iterdir():
        m = SEGMENT.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def check_formats(segments: list[tuple[int, Path]]) -> None:
    """Raise `NewerFormat` if any segment's header names a format this build cannot read:
    checked for every segment before the first record is applied, so a newer log stops a
    start whole rather than half-way through a replay."""
    for _first, path in segments:
        with mapped(path) as data:
            read_header(data[:4096], f"WAL segment {path.name}")


def records_start(data: bytes | memoryview, path: Path) -> int:
    """The offset of a segment's first record (after its header, if it has one)."""
    return read_header(data, f"WAL segment {path.name}")[1]


def scan_wal(
    wal_dir: Path,
    after_seq: int = 0,
    on_event: Callable[[int, Event], None] | None = None,
) -> WalScan:
    """Read every record; call `on_event(seq, event)` for those with seq > `after_seq`.

    Every frame is checked (length, CRC, sequence continuity), but a record at or below
    `after_seq` (what the checkpoint covers) is not decoded: its sequence number and epoch
    are read from fixed places in its header (`xce.wire.fast.peek_entry`). Raises
    `WalCorruption` for damage that is not a torn tail, and `NewerFormat` (before any record
    is read, so nothing is applied or judged) when a segment's header names a format newer
    than this build reads.
    """
    segments = list_segments(wal_dir)
    scan = WalScan(last_seq=after_seq, segments=[p for _, p in segments])
    check_formats(segments)
    expected: int | None = None
    for index, (first_seq, path) in enumerate(segments):
        last_segment = index == len(segments) - 1
        with mapped(path) as data:
            if _scan_segment(
                scan, path, data, first_seq, after_seq, on_event, last_segment, expected
            ):
                break
            expected = scan.next_expected
    return scan


def _scan_segment(
    scan: WalScan,
    path: Path,
    data: memoryview,
    first_seq: int,
    after_seq: int,
    on_event: Callable[[int, Event], None] | None,
    last_segment: bool,
    expected: int | None,
) -> bool:
    """One segment of `scan_wal`; True when it ended in a torn tail."""
    _fmt, start, _release = read_header(data, f"WAL segment {path.name}")
    try:
        for offset, _end, payload in iter_frames(data, start):
            event: Event | None = None
            try:
                seq, epoch = peek_entry(payload)
                covered = seq <= after_seq
            except FAST_REJECTS:
                covered = False  # not the usual shape: the full decode reads it
            if not covered:
                try:
                    seq, epoch, event = decode_entry(bytes(payload))
                except WireError as exc:
                    raise WalCorruption(path, offset, exc.message) from None
            if expected is None:
                if seq != first_seq:
                    raise WalCorruption(
                        path, offset, f"first record is {seq}, name says {first_seq}"
                    )
            elif seq != expected:
                raise WalCorruption(path, offset, f"expected record {expected}, found {seq}")
            expected = seq + 1
            scan.records += 1
            scan.last_seq = max(scan.last_seq, seq)
            scan.last_epoch = epoch
            if event is not None and seq > after_seq and on_event is not None:
                on_event(seq, event)
    except CorruptRecord as exc:
        if last_segment and exc.torn and not has_valid_frame_after(data, exc.offset):
            scan.torn = TornTail(path, exc.offset, exc.why)
            return True
        raise WalCorruption(path, exc.offset, exc.why) from None
    if expected is None and first_seq > 0:
        expected = first_seq  # an empty (preallocated, never written) segment
    scan.next_expected = expected
    return False
