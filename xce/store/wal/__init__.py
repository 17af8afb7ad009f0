"""The write-ahead log: framed Cap'n Proto records in bounded segment files."""

from xce.store.wal.framing import FRAME_HEADER, CorruptRecord, frame, read_frames
from xce.store.wal.reader import WalCorruption, WalScan, scan_wal
from xce.store.wal.writer import WalWriter

__all__ = [
    "FRAME_HEADER",
    "CorruptRecord",
    "WalCorruption",
    "WalScan",
    "WalWriter",
    "frame",
    "read_frames",
    "scan_wal",
]
