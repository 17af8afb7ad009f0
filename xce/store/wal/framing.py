"""Record framing shared by WAL segments and checkpoint files.

A frame is `length:u32le | crc32:u32le | payload`, padded with zeros to a multiple of 8
bytes. The CRC covers the length bytes and the payload, so a torn length is caught as surely
as a torn payload. A zero length marks the end of written data in a preallocated segment.

Damage is classified (`CorruptRecord.torn`) the way etcd's WAL decoder does it, so that a
crash's torn write can be cut while a complete record that fails its checksum (a bit flip in
an acknowledged record) stops the start: a frame that runs past the end of the file is torn;
a frame whose checksum fails is torn only if one of its 512-byte disk sectors is all zeros
(written space in a preallocated segment is zeros until the write lands, and a disk writes a
sector whole or not at all). A checksum that a single flipped bit of the length explains is
damage, not a tear (the longer frame would otherwise reach into the zeros after it). A
damaged record whose own bytes hold a whole zero sector still reads as torn, as in etcd.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

FRAME_HEADER = struct.Struct("<II")
MAX_PAYLOAD = 64 * 1024 * 1024
ALIGN = 8
SECTOR = 512  # the unit a disk writes whole (etcd's minSectorSize)
_ZEROS = bytes(SECTOR)


class CorruptRecord(Exception):
    """A frame whose length or checksum is wrong, at `offset`; `torn` when it looks like a
    write that a crash interrupted rather than damage to a complete record."""

    def __init__(self, offset: int, why: str, torn: bool = False) -> None:
        super().__init__(f"corrupt record at byte {offset}: {why}")
        self.offset = offset
        self.why = why
        self.torn = torn


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
            raise CorruptRecord(offset, "truncated frame header", torn=True)
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
        raise CorruptRecord(offset, "frame runs past the end of the file (torn write)", torn=True)
    payload = data[start:end]
    if _crc(length, payload) != crc:
        if _looks_torn(data, offset, length, crc):
            raise CorruptRecord(
                offset, "checksum mismatch, a zeroed sector (torn write)", torn=True
            )
        raise CorruptRecord(offset, "checksum mismatch in a complete record (not a torn write)")
    return Frame(offset, offset + frame_size(length), bytes(payload))


def _looks_torn(data: memoryview, offset: int, length: int, crc: int) -> bool:
    """Whether a frame that fails its checksum was cut short by a crash (module doc)."""
    start = offset + FRAME_HEADER.size
    for bit in range(32):
        other = length ^ (1 << bit)
        if (
            0 < other <= min(MAX_PAYLOAD, len(data) - start)
            and _crc(other, data[start : start + other]) == crc
        ):
            return False  # the length was hit, not the write
    pos, end = offset, start + length
    while pos < end:
        stop = min(end, (pos // SECTOR + 1) * SECTOR)
        if data[pos:stop] == _ZEROS[: stop - pos]:
            return True
        pos = stop
    return False


def read_frames(data: bytes | memoryview, offset: int = 0) -> Iterator[Frame]:
    """Every frame from `offset` up to the end marker; raises `CorruptRecord` on damage."""
    for start, end, payload in iter_frames(data, offset):
        yield Frame(start, end, bytes(payload))


def iter_frames(data: bytes | memoryview, offset: int = 0) -> Iterator[tuple[int, int, memoryview]]:
    """(offset, end, payload view) of every frame from `offset` up to the end marker.

    The loop checks what `parse_at` checks for an intact frame (a length in range inside the
    file, the CRC over length and payload) with the least work per frame: recovery frames
    every record it reads, also those a checkpoint covers. Anything that is not an intact
    frame goes to `parse_at`, which tells the end marker from damage and classifies it, so
    both paths accept and reject exactly the same bytes.
    """
    view = memoryview(data)
    size = len(view)
    unpack, crc32, header = FRAME_HEADER.unpack_from, zlib.crc32, FRAME_HEADER.size
    while True:
        if offset + header <= size:
            length, crc = unpack(view, offset)
            start = offset + header
            end = start + length
            if 0 < length <= MAX_PAYLOAD and end <= size:
                payload = view[start:end]
                if crc32(payload, crc32(view[offset : offset + 4])) == crc:
                    following = end + (-end % ALIGN)
                    yield offset, following, payload
                    offset = following
                    continue
        found = parse_at(view, offset)  # None at the end marker, else raises CorruptRecord
        if found is not None:  # pragma: no cover - the fast checks above accept every intact
            raise AssertionError(f"frame at {offset} passed parse_at but not the fast check")
        return


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
