"""Record framing shared by WAL segments and checkpoint files.

A frame is `length:u32le | crc32:u32le | payload`, padded with zeros to a multiple of 8
bytes. The CRC covers the length bytes and the payload, so a torn length is caught as surely
as a torn payload. A zero length marks the end of written data in a preallocated segment.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

FRAME_HEADER = struct.Struct("<II")
MAX_PAYLOAD = 64 * 1024 * 1024
ALIGN = 8


class CorruptRecord(Exception):
    """A frame whose length or checksum is wrong, at `offset`."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(f"corrupt record at byte {offset}: {why}")
        self.offset = offset
        self.why = why


def _crc(length: int, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little")))


def frame(payload: bytes) -> bytes:
    n = len(payload)
    if n == 0 or n > MAX_PAYLOAD:
        raise ValueError(f"payload of {n} bytes cannot be framed")
    pad = -(FRAME_HEADER.size + n) % ALIGN
    return FRAME_HEADER.pack(n, _crc(n, payload)) + payload + b"\0" * pad


def frame_size(payload_len: int) -> int:
    raw = FRAME_HEADER.size + payload_len
    return raw + (-raw % ALIGN)


@dataclass(frozen=True)
class Frame:
    offset: int
    end: int
    payload: bytes


def parse_at(data: memoryview, offset: int) -> Frame | None:
    """The frame at `offset`; None at the end-of-data marker; raises `CorruptRecord`."""
    if offset + FRAME_HEADER.size > len(data):
        if any(data[offset:]):
            raise CorruptRecord(offset, "truncated frame header")
        return None
    length, crc = FRAME_HEADER.unpack_from(data, offset)
    if length == 0:
        if crc != 0:
            raise CorruptRecord(offset, "zero length with a checksum")
        return None
    if length > MAX_PAYLOAD:
        raise CorruptRecord(offset, f"length {length} is impossible")
    start = offset + FRAME_HEADER.size
    end = start + length
    if end > len(data):
        raise CorruptRecord(offset, "frame runs past the end of the file (torn write)")
    payload = data[start:end]
    if _crc(length, payload) != crc:
        raise CorruptRecord(offset, "checksum mismatch")
    return Frame(offset, offset + frame_size(length), bytes(payload))


def read_frames(data: bytes | memoryview, offset: int = 0) -> Iterator[Frame]:
    """Every frame from `offset` up to the end marker; raises `CorruptRecord` on damage."""
    view = memoryview(data)
    while True:
        found = parse_at(view, offset)
        if found is None:
            return
        yield found
        offset = found.end


def has_valid_frame_after(data: bytes | memoryview, offset: int) -> bool:
    """Whether any intact frame starts at an aligned offset past `offset` (slow path)."""
    view = memoryview(data)
    pos = offset - offset % ALIGN + ALIGN
    while pos + FRAME_HEADER.size <= len(view):
        length = int.from_bytes(view[pos : pos + 4], "little")
        if 0 < length <= len(view) - pos - FRAME_HEADER.size:
            try:
                if parse_at(view, pos) is not None:
                    return True
            except CorruptRecord:
                pass
        pos += ALIGN
    return False
