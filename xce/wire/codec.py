"""Encode and decode events and records as Cap'n Proto messages.

The mapping is driven by the same field plans that generated the schema, so a dataclass and
its wire form cannot drift apart. Decoding copies everything out of the message before the
reader closes (pycapnp readers must not outlive `from_bytes`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import capnp

from xce.core.arrayspec import IndexSet
from xce.core.errors import XceError
from xce.core.events import Event
from xce.wire.fast import FAST_REJECTS, read_entry
from xce.wire.plain import unpack_records
from xce.wire.schema import FieldPlan, lower_first, plans
from xce.wire.types import EVENT_TYPES, RECORD_TYPES

SCHEMA_PATH = Path(__file__).with_name("xce.capnp")
TRAVERSAL_LIMIT = 64 * 1024 * 1024 // 8  # in words


class WireError(XceError):
    """A payload that is not a valid XCE message."""

    code = "wire_error"


@cache
def schema() -> Any:
    return capnp.load(str(SCHEMA_PATH), imports=[])


_EVENT_FIELD = {cls: lower_first(cls.__name__) for cls in EVENT_TYPES}
_EVENT_BY_FIELD = {v: k for k, v in _EVENT_FIELD.items()}
_PLANS: dict[type, list[FieldPlan]] = {}


def _plans(cls: type) -> list[FieldPlan]:
    found = _PLANS.get(cls)
    if found is None:
        skip = ("at",) if cls in _EVENT_FIELD else ()
        found = _PLANS[cls] = plans(cls, skip)
    return found


# --- building -------------------------------------------------------------------------------


def _fill(builder: Any, obj: Any) -> None:
    for f in _plans(type(obj)):
        value = getattr(obj, f.py)
        kind = f.kind
        if kind == "scalar":
            setattr(builder, f.cap, value)
        elif kind == "enum":
            setattr(builder, f.cap, value.value)
        elif kind == "opt":
            if value is not None:
                builder.init(f.cap).value = value
        elif kind == "struct":
            _fill(builder.init(f.cap), value)
        elif kind == "optstruct":
            if value is not None:
                _fill(builder.init(f.cap), value)
        elif kind == "list_text":
            items = builder.init(f.cap, len(value))
            for i, item in enumerate(value):
                items[i] = item
        elif kind == "list_kv":
            items = builder.init(f.cap, len(value))
            for i, (k, v) in enumerate(value):
                items[i].key = k
                items[i].value = v
        elif kind == "list_struct":
            items = builder.init(f.cap, len(value))
            for i, item in enumerate(value):
                _fill(items[i], item)
        elif kind == "indexset":
            items = builder.init(f.cap, len(value.ranges))
            for i, r in enumerate(value.ranges):
                items[i].start, items[i].stop, items[i].step = r.start, r.stop, r.step


def _read(reader: Any, cls: type, **extra: Any) -> Any:
    kwargs: dict[str, Any] = dict(extra)
    for f in _plans(cls):
        kind = f.kind
        if kind == "scalar":
            value = getattr(reader, f.cap)
            if f.py_type is str:
                value = str(value)
        elif kind == "enum":
            value = f.py_type(getattr(reader, f.cap))
        elif kind == "opt":
            value = getattr(reader, f.cap).value if reader._has(f.cap) else None
        elif kind == "struct":
            value = _read(getattr(reader, f.cap), f.py_type)
        elif kind == "optstruct":
            value = _read(getattr(reader, f.cap), f.py_type) if reader._has(f.cap) else None
        elif kind == "list_text":
            value = tuple(str(x) for x in getattr(reader, f.cap))
        elif kind == "list_kv":
            value = tuple((str(x.key), str(x.value)) for x in getattr(reader, f.cap))
        elif kind == "list_struct":
            value = tuple(_read(x, f.py_type) for x in getattr(reader, f.cap))
        elif kind == "indexset":
            value = IndexSet(tuple(range(x.start, x.stop, x.step) for x in getattr(reader, f.cap)))
        else:  # pragma: no cover - plans() only produces the kinds above
            raise WireError(f"unknown field kind {kind}")
        kwargs[f.py] = value
    return cls(**kwargs)


# --- events ---------------------------------------------------------------------------------


def encode_entry(seq: int, epoch: int, event: Event) -> bytes:
    """A WAL payload: `WalEntry{seq, epoch, event}` as packed-free Cap'n Proto bytes."""
    entry = schema().WalEntry.new_message(seq=seq, epoch=epoch)
    ev = entry.init("event")
    ev.at = event.at
    field = _EVENT_FIELD.get(type(event))
    if field is None:
        raise WireError(f"event type {type(event).__name__} has no wire form")
    try:
        _fill(ev.init(field), event)
        return entry.to_bytes()
    except Exception as exc:  # a value the schema cannot hold (overflow, bad text)
        raise WireError(
            f"cannot encode {type(event).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from None


def decode_entry(data: bytes) -> tuple[int, int, Event]:
    """(seq, epoch, event): the generated reader (`fast.py`) for the usual shape, this
    module's reflective reader for anything else and for the verdict on bad bytes."""
    try:
        return read_entry(data)
    except FAST_REJECTS:  # not the usual shape, or bad bytes: the reference decides
        return decode_entry_reflective(data)


def decode_entry_reflective(data: bytes) -> tuple[int, int, Event]:
    """The reference reader: pycapnp accessors walked field by field."""
    try:
        with schema().WalEntry.from_bytes(data, traversal_limit_in_words=TRAVERSAL_LIMIT) as r:
            ev = r.event
            field = str(ev.which())
            cls = _EVENT_BY_FIELD[field]
            return r.seq, r.epoch, _read(getattr(ev, field), cls, at=ev.at)
    except WireError:
        raise
    except Exception as exc:  # pycapnp raises KjException and friends on bad bytes
        raise WireError(f"cannot decode WAL entry: {str(exc).splitlines()[0]}") from None


# --- records (checkpoints) ------------------------------------------------------------------

_CHUNK_FIELDS = {
    "jobs": "JobRecord",
    "arrays": "ArrayRecord",
    "queues": "QueueRecord",
    "hosts": "HostRecord",
    "reservations": "ReservationRecord",
}
_RECORD_BY_NAME = {cls.__name__: cls for cls in RECORD_TYPES}


def encode_records(kind: str, records: list[Any]) -> bytes:
    chunk = schema().CheckpointChunk.new_message()
    items = chunk.init(kind, len(records))
    for i, record in enumerate(records):
        _fill(items[i], record)
    return chunk.to_bytes()


def encode_packed(kind: str, data: bytes) -> bytes:
    chunk = schema().CheckpointChunk.new_message()
    packed = chunk.init("packed")
    packed.kind = kind
    packed.data = data
    return chunk.to_bytes()


def encode_header(**fields: Any) -> bytes:
    chunk = schema().CheckpointChunk.new_message()
    header = chunk.init("header")
    for key, value in fields.items():
        setattr(header, key, value)
    return chunk.to_bytes()


def decode_chunk(data: bytes) -> tuple[str, Any]:
    """("header", dict) or (kind, [records])."""
    try:
        with schema().CheckpointChunk.from_bytes(
            data, traversal_limit_in_words=TRAVERSAL_LIMIT
        ) as r:
            kind = str(r.which())
            if kind == "header":
                h = r.header
                return kind, {
                    k: getattr(h, k)
                    for k in (
                        "seq",
                        "epoch",
                        "nextNumber",
                        "createdAt",
                        "formatVersion",
                        "jobs",
                        "arrays",
                        "numberCeiling",
                    )
                }
            if kind == "packed":
                inner = str(r.packed.kind)
                cls = _RECORD_BY_NAME[_CHUNK_FIELDS[inner]]
                return inner, unpack_records(cls, bytes(r.packed.data))
            cls = _RECORD_BY_NAME[_CHUNK_FIELDS[kind]]
            return kind, [_read(x, cls) for x in getattr(r, kind)]
    except Exception as exc:
        raise WireError(f"cannot decode checkpoint chunk: {str(exc).splitlines()[0]}") from None
