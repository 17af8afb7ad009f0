"""The bytes of a packed checkpoint chunk: versioned msgpack, and the `marshal` layout before it.

A chunk is `(kind, spec table or None, rows)` of plain tuples (xce/wire/plain.py). It used to
be written with `marshal`, whose format Python does not promise to keep from one version to
the next; it is now `MAGIC + version (2 bytes, big-endian) + msgpack` through msgspec
(msgspec: a C encoder and decoder about as fast as marshal, with typed decoding, and a format
with a specification). A chunk without the magic is a `marshal` one from an older build and
is still read, so existing state directories recover; an unknown version is refused by name.

Decoding is typed: each record type's row is a fixed-length tuple type derived from the same
field plans as the rows themselves, so msgspec builds tuples (hashable specs, as marshal gave)
in C. A chunk whose rows do not fit that type (written before fields were appended to a
record) is decoded untyped and its arrays turned back into tuples: slower, but only once.
"""

from __future__ import annotations

import marshal
import struct
from types import GenericAlias
from typing import Any

import msgspec

from xce.core.model import JobRecord, JobSpec
from xce.wire.schema import FieldPlan, plans

MAGIC = b"XCEP"
VERSION = 1  # 1: msgpack of (kind, table, rows)
READABLE_VERSIONS = (VERSION,)
_HEAD = struct.Struct(">4sH")

Chunk = tuple[str, Any, Any]

_encoder = msgspec.msgpack.Encoder()
_untyped = msgspec.msgpack.Decoder()
_DECODERS: dict[type, msgspec.msgpack.Decoder[Any]] = {}


class UnknownFormat(ValueError):
    """A packed chunk written by a newer build (or not a chunk at all)."""


def pack(chunk: Chunk) -> bytes:
    """`chunk` as versioned msgpack."""
    return _HEAD.pack(MAGIC, VERSION) + _encoder.encode(chunk)


def unpack(cls: type, data: bytes) -> Chunk:
    """(kind, table, rows) of a chunk of `cls` records, in either format; rows are tuples."""
    if not data.startswith(MAGIC):
        return marshal.loads(data)  # a chunk of an older build
    if len(data) < _HEAD.size:
        raise UnknownFormat("packed records: truncated version header")
    _, version = _HEAD.unpack_from(data)
    if version not in READABLE_VERSIONS:
        raise UnknownFormat(
            f"packed records format version {version} is unknown (this build reads "
            f"version {', '.join(map(str, READABLE_VERSIONS))}): written by a newer XCE?"
        )
    body = memoryview(data)[_HEAD.size :]
    try:
        return decoder(cls).decode(body)
    except msgspec.ValidationError:
        kind, table, rows = _untyped.decode(body)
        return kind, _tuples(table), _tuples(rows)


def _tuples(value: Any) -> Any:
    """msgpack arrays back into the tuples they were written from (plain rows hold no lists)."""
    if isinstance(value, list):
        return tuple([_tuples(v) for v in value])
    return value


def decoder(cls: type) -> msgspec.msgpack.Decoder[Any]:
    """The typed decoder of a chunk of `cls` records (made once per type)."""
    found = _DECODERS.get(cls)
    if found is None:
        if cls is JobRecord:  # rows name their spec by its index in the table
            specs, rows = row_type(JobSpec), row_type(cls, "spec")
            table = GenericAlias(list, (specs,)) | None
            chunk: Any = GenericAlias(tuple, (str, table, GenericAlias(list, (rows,))))
        else:
            chunk = GenericAlias(tuple, (str, None, GenericAlias(list, (row_type(cls),))))
        found = _DECODERS[cls] = msgspec.msgpack.Decoder(chunk)
    return found


def row_type(cls: type, index_field: str | None = None) -> Any:
    """The tuple type of a `cls` row; `index_field` holds an int (the spec table's index).
    Built with `GenericAlias`, the runtime form of `tuple[...]`: its members are values."""
    fields = tuple(int if f.py == index_field else _field_type(f) for f in plans(cls))
    return GenericAlias(tuple, fields)


def _field_type(f: FieldPlan) -> Any:
    kind, t = f.kind, f.py_type
    scalar = int | float if t is float else t  # marshal kept an int given as a float
    if kind == "scalar":
        return scalar
    if kind == "opt":
        return scalar | None
    if kind == "enum":
        return type(next(iter(t)).value)
    if kind == "struct":
        return row_type(t)
    if kind == "optstruct":
        return row_type(t) | None
    if kind == "list_text":
        return tuple[str, ...]
    if kind == "list_kv":
        return tuple[tuple[Any, Any], ...]
    if kind == "list_struct":
        return GenericAlias(tuple, (row_type(t), ...))
    if kind == "indexset":
        return tuple[tuple[int, int, int], ...]
    raise TypeError(f"no packed form for field {f.py} ({kind})")
