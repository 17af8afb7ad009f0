"""A WAL segment's header: the first frame of a segment names the format its records are in.

Format 1 segments (written before formats were named) have no header: their first frame is
a record. From format 2 on, a segment starts with one frame whose payload is
`XCEWAL | format:u16le | the writing release (UTF-8)`. No Cap'n Proto record can begin with
these bytes (a message's first word is its segment count, 0 for every record), so a reader
tells the two apart by the first frame alone. A header of a format newer than this build
reads stops the reader with `NewerFormat`: its records are never judged as damage nor cut.
"""

from __future__ import annotations

import struct

from xce.core.versions import RELEASE, WAL_FORMAT, NewerFormat
from xce.store.wal.framing import CorruptRecord, frame, parse_at

MAGIC = b"XCEWAL"
_FORMAT = struct.Struct("<H")


def header_frame(fmt: int = WAL_FORMAT, release: str = RELEASE) -> bytes:
    """The framed header a new segment starts with."""
    return frame(MAGIC + _FORMAT.pack(fmt) + release.encode())


def read_header(data: bytes | memoryview, name: str = "WAL segment") -> tuple[int, int, str]:
    """(format, offset of the first record, writing release) of a segment's bytes.

    A segment without a header is format 1 with records from byte 0, and so is one whose
    first frame is damaged (the record scan reports that damage where it lies). Raises
    `NewerFormat` for a header this build cannot read."""
    view = memoryview(data)
    try:
        first = parse_at(view, 0)
    except CorruptRecord:
        return 1, 0, ""
    if first is None or not first.payload.startswith(MAGIC):
        return 1, 0, ""
    body = first.payload[len(MAGIC) :]
    if len(body) < _FORMAT.size:
        return 1, 0, ""  # not a header after all: the scan judges it as a record
    (fmt,) = _FORMAT.unpack_from(body, 0)
    release = body[_FORMAT.size :].decode("utf-8", "replace")
    if fmt > WAL_FORMAT:
        raise NewerFormat(name, fmt, WAL_FORMAT, release)
    return fmt, first.end, release
