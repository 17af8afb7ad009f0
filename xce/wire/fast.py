"""A fast reader for WAL entries: Cap'n Proto bytes read directly, one generated function
per struct type.

Replay and a standby's catch-up decode every record, and the reflective walk in `codec._read`
(a pycapnp attribute lookup and a kind dispatch per field) costs ~35-80 us a record. Here the
wire layout (each field's offset, taken once from the compiled schema) and the field plans
(the same ones that generated the schema) are turned into Python source once per type: a
struct's data section is unpacked with one precompiled `struct.Struct`, its pointer section
with another, and each field becomes one expression. A typical submit/start/finish record
then reads in a few microseconds.

Only the common shape is handled: a single-segment message (every record below ~8 KiB) in
the layout the current schema writes, or a smaller one from an older schema (fields appended
since read as their defaults, as Cap'n Proto specifies). Anything else — a multi-segment
message, a far pointer, an unexpected list encoding, any bounds or text problem — raises
`Fallback`, and `codec.decode_entry` then uses the reflective reader, which is the reference
(it also produces the `WireError`s). A test checks that both agree on every event type.

`peek_entry` reads only a record's sequence number and epoch (two words at a fixed place
behind the root pointer): recovery uses it to step over the records a checkpoint covers
without decoding them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields as dc_fields
from functools import cache
from typing import Any

from xce.core.arrayspec import IndexSet
from xce.wire.schema import lower_first, plans
from xce.wire.types import EVENT_TYPES

_WORD = struct.Struct("<Q")
_HEADER = struct.Struct("<II")
_SEQ_EPOCH = struct.Struct("<QQ")
_RANGE = struct.Struct("<qqq")
_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")
_UNION = struct.Struct("<H")
_HEAD = struct.Struct("<QQ")  # segment table (count - 1, first size) and the root pointer
_SIZES = {
    "int64": ("q", 8),
    "uint64": ("Q", 8),
    "float64": ("d", 8),
    "uint32": ("I", 4),
    "uint16": ("H", 2),
    "int32": ("i", 4),
}


class Fallback(Exception):
    """This message is not in the shape the fast reader handles; use the reflective one."""


class GenerationError(RuntimeError):
    """A type the generator cannot map (a bug, never bad input): not a `Fallback`."""


# --- pointers -------------------------------------------------------------------------------
# A pointer is one little-endian word at byte `at`; its target is `at + 8 + offset * 8`.
# `lim` is the end of the (only) segment; every target is checked against [8, lim).


def _offset(w: int) -> int:
    """The signed 30-bit word offset of a struct or list pointer (the helpers inline it)."""
    return (((w >> 2) & 0x3FFFFFFF) ^ 0x20000000) - 0x20000000


def _struct(w: int, at: int, lim: int) -> tuple[int, int, int]:
    """(data start, data words, pointer count) of a struct pointer; a null one is empty."""
    if not w:
        return 0, 0, 0
    if w & 3:
        raise Fallback
    p = at + 8 + ((((w >> 2) & 0x3FFFFFFF) ^ 0x20000000) - 0x20000000) * 8
    dw = (w >> 32) & 0xFFFF
    pc = w >> 48
    if p < 8 or p + (dw + pc) * 8 > lim:
        raise Fallback
    return p, dw, pc


def _text(buf: bytes, at: int, w: int, lim: int) -> str:
    if not w:
        return ""
    # A list pointer (low bits 01) of bytes (element size 2) pointing forward (offset sign
    # bit 31 clear), as a builder writes every text; anything else goes to the reference.
    if w & 0x780000003 != 0x200000001:
        raise Fallback
    start = at + 8 + ((w & 0x7FFFFFFC) << 1)
    end = start + (w >> 35) - 1  # the count includes the NUL
    if not start <= end < lim or buf[end]:
        raise Fallback
    return buf[start:end].decode()


def _composite(buf: bytes, at: int, w: int, lim: int) -> tuple[int, int, int, int]:
    """(first element, element count, data words, pointers) of a list of structs."""
    if w & 3 != 1 or (w >> 32) & 7 != 7:
        raise Fallback
    tag_at = at + 8 + ((((w >> 2) & 0x3FFFFFFF) ^ 0x20000000) - 0x20000000) * 8
    words = w >> 35
    if tag_at < 8 or tag_at + 8 + words * 8 > lim:
        raise Fallback
    tag = _WORD.unpack_from(buf, tag_at)[0]
    if tag & 3:
        raise Fallback
    count = (tag >> 2) & 0x3FFFFFFF
    dw = (tag >> 32) & 0xFFFF
    pc = tag >> 48
    if count * (dw + pc) > words:
        raise Fallback
    return tag_at + 8, count, dw, pc


def _list_text(buf: bytes, at: int, w: int, lim: int) -> tuple[str, ...]:
    if not w:
        return ()
    if w & 3 != 1 or (w >> 32) & 7 != 6:
        raise Fallback
    start = at + 8 + ((((w >> 2) & 0x3FFFFFFF) ^ 0x20000000) - 0x20000000) * 8
    n = w >> 35
    if start < 8 or start + n * 8 > lim:
        raise Fallback
    words = struct.unpack_from(f"<{n}Q", buf, start)
    return tuple([_text(buf, start + 8 * i, words[i], lim) for i in range(n)])


def _list_kv(buf: bytes, at: int, w: int, lim: int) -> tuple[tuple[str, str], ...]:
    if not w:
        return ()
    p, count, dw, pc = _composite(buf, at, w, lim)
    size = (dw + pc) * 8
    out = []
    for _ in range(count):
        base = p + dw * 8
        k = _text(buf, base, _WORD.unpack_from(buf, base)[0], lim) if pc > 0 else ""
        v = _text(buf, base + 8, _WORD.unpack_from(buf, base + 8)[0], lim) if pc > 1 else ""
        out.append((k, v))
        p += size
    return tuple(out)


def _indexset(buf: bytes, at: int, w: int, lim: int) -> IndexSet:
    if not w:
        return IndexSet(())
    p, count, dw, _pc = _composite(buf, at, w, lim)
    if dw < 3:
        raise Fallback
    size = (dw + _pc) * 8
    return IndexSet(tuple([range(*_RANGE.unpack_from(buf, p + i * size)) for i in range(count)]))


def _opt_num(buf: bytes, at: int, w: int, lim: int, fmt: struct.Struct) -> Any:
    p, dw, _pc = _struct(w, at, lim)
    return fmt.unpack_from(buf, p)[0] if dw else fmt.unpack(bytes(fmt.size))[0]  # 0 or 0.0


def _opt_text(buf: bytes, at: int, w: int, lim: int) -> str:
    p, dw, pc = _struct(w, at, lim)
    if not pc:
        return ""
    base = p + dw * 8
    return _text(buf, base, _WORD.unpack_from(buf, base)[0], lim)


# --- generated readers ------------------------------------------------------------------------

Reader = Callable[..., Any]


@cache
def _nodes() -> dict[str, Any]:
    from xce.wire.codec import schema  # codec imports this module: resolve at first use

    s = schema()
    return {name: getattr(s, name).schema.node for name in dir(s) if name[:1].isupper()}


def _layout(cls: type) -> tuple[int, int, dict[str, tuple[str, int]]]:
    """(data words, pointers, {capnp field: (type, slot offset)}) from the compiled schema."""
    node = _nodes()[cls.__name__]
    slots = {
        str(f.name): (str(f.slot.type.which()), int(f.slot.offset)) for f in node.struct.fields
    }
    return int(node.struct.dataWordCount), int(node.struct.pointerCount), slots


_READERS: dict[type, Reader] = {}


def reader_for(cls: type) -> Reader:
    """`read(buf, p, dw, pc, lim[, at])` for `cls` (events take their `at` last)."""
    found = _READERS.get(cls)
    if found is None:
        found = _READERS[cls] = _generate(cls)
    return found


def _generate(cls: type) -> Reader:
    is_event = cls in EVENT_TYPES
    field_plans = plans(cls, ("at",) if is_event else ())
    names = [f.name for f in dc_fields(cls)]
    if names != (["at"] if is_event else []) + [f.py for f in field_plans]:
        raise GenerationError(f"{cls.__name__}: field order differs from its plans")
    dw_full, pc_full, slots = _layout(cls)
    env: dict[str, Any] = {
        "cls": cls,
        "Fallback": Fallback,
        "unpack_from": struct.unpack_from,
        "WORD": _WORD,
        "_struct": _struct,
        "_text": _text,
        "_list_text": _list_text,
        "_list_kv": _list_kv,
        "_indexset": _indexset,
        "_opt_num": _opt_num,
        "_opt_text": _opt_text,
        "_composite": _composite,
        "IndexSet": IndexSet,
        "INT64": _INT64,
        "FLOAT64": _FLOAT64,
        # A list pointer (low bits 01) of pointers (element size 6) with no elements
        # (bits 35.. zero): an empty List(Text). Lists of structs have a tag word to check.
        "EMPTY": 0xFFFFFFFF00000003,
        "EMPTY_TEXTS": 0x600000001,
    }
    # The data section: each data field's byte offset, format and how to turn it into Python.
    data: list[tuple[int, str, str]] = []  # (byte offset, struct format, name)
    exprs: list[str] = []
    for f in field_plans:
        kind = f.kind
        ctype, offset = slots[f.cap]
        if kind == "scalar" and f.py_type is not str:
            if ctype == "bool":  # bools share bytes: one variable per byte
                byte, bit = divmod(offset, 8)
                if (byte, "B", f"byte{byte}") not in data:
                    data.append((byte, "B", f"byte{byte}"))
                exprs.append(f"(d_byte{byte} >> {bit}) & 1 == 1")
            else:
                fmt, size = _SIZES[ctype]
                data.append((offset * size, fmt, f.py))
                exprs.append(f"d_{f.py}")
            continue
        at = f"base + {offset * 8}"
        w = f"w[{offset}]"
        args = f"buf, {at}, {w}, lim"
        if kind in ("scalar", "enum"):
            text = f"_text({args})"
            if kind == "enum":  # an unknown value is a KeyError: the reference decides
                env[f"E_{f.py}"] = f.py_type._value2member_map_
                text = f"E_{f.py}[{text}]"
            else:
                text = _inline_text(offset, f"_text({args})")
            exprs.append(text)
        elif kind == "opt":
            inner = {
                int: "_opt_num({args}, INT64)",
                float: "_opt_num({args}, FLOAT64)",
                str: "_opt_text({args})",
            }[f.py_type].format(args=args)
            exprs.append(f"(None if not {w} else {inner})")
        elif kind in ("struct", "optstruct"):
            env[f"R_{f.py}"] = reader_for(f.py_type)
            value = f"R_{f.py}(buf, *_struct({w}, {at}, lim), lim)"
            exprs.append(value if kind == "struct" else f"(None if not {w} else {value})")
        elif kind == "list_text":
            exprs.append(f"(() if not {w} or {w} & EMPTY == EMPTY_TEXTS else _list_text({args}))")
        elif kind == "list_kv":
            exprs.append(_inline_empty(offset, f"(_list_kv({args}) if {w} else ())"))
        elif kind == "indexset":
            exprs.append(f"_indexset({args})")
        elif kind == "list_struct":
            env[f"R_{f.py}"] = reader_for(f.py_type)
            exprs.append(
                _inline_empty(
                    offset, f"(_list_struct(buf, {at}, {w}, lim, R_{f.py}) if {w} else ())"
                )
            )
            env["_list_struct"] = _list_struct
        else:  # pragma: no cover - plans() only produces the kinds above
            raise GenerationError(f"unknown field kind {kind}")
    data.sort()
    env["DATA_FULL"] = struct.Struct("<" + _data_format(data))
    env["DATA_FIELDS"] = [(off, fmt) for off, fmt, _ in data]
    env["PTRS_FULL"] = struct.Struct(f"<{pc_full}Q")
    env["_short"] = _short
    data_names = [f"d_{name}" for _, _, name in data]
    unpack_data = f"{', '.join(data_names)}, = " if data else ""
    lines = [
        f"def read(buf, p, dw, pc, lim{', at' if is_event else ''}):",
        f"    if dw >= {dw_full} and pc >= {pc_full}:",
        f"        {unpack_data}DATA_FULL.unpack_from(buf, p)" if data else "        pass",
        "        w = PTRS_FULL.unpack_from(buf, p + dw * 8)" if pc_full else "        w = ()",
        "    else:",
        f"        dvals, w = _short(buf, p, dw, pc, DATA_FIELDS, {pc_full})",
        f"        {unpack_data}dvals" if data else "        pass",
        "    base = p + dw * 8",
        f"    return cls({'at, ' if is_event else ''}{', '.join(exprs)})",
    ]
    code = "\n".join(lines)
    exec(compile(code, f"<xce.wire.fast {cls.__name__}>", "exec"), env)
    return env["read"]


def _inline_text(i: int, slow: str) -> str:
    """Pointer `i` as text, the usual case inline (no call): a forward list pointer of
    bytes inside the segment, NUL-terminated; anything else (null too) goes to `_text`."""
    return (
        f"(buf[s:e].decode() if (x := w[{i}]) & 0x780000003 == 0x200000001 and "
        f"(s := base + {i * 8 + 8} + ((x & 0x7FFFFFFC) << 1)) <= "
        f"(e := s + (x >> 35) - 1) < lim and not buf[e] else {slow})"
    )


def _inline_empty(i: int, slow: str) -> str:
    """Pointer `i` as an empty list of structs, inline when it is one: a forward composite
    list pointer with no words whose tag word (in the segment) says struct, no elements."""
    return (
        f"(() if (x := w[{i}]) & 0xFFFFFFFF80000003 == 0x700000001 and "
        f"(s := base + {i * 8 + 8} + ((x & 0x7FFFFFFC) << 1)) + 8 <= lim and "
        f"not WORD.unpack_from(buf, s)[0] & 0xFFFFFFFF else {slow})"
    )


def _data_format(data: list[tuple[int, str, str]]) -> str:
    out, pos = [], 0
    for off, fmt, _ in data:
        if off < pos:
            raise GenerationError("overlapping data fields")
        if off > pos:
            out.append(f"{off - pos}x")
        out.append(fmt)
        pos = off + struct.calcsize("<" + fmt)
    return "".join(out)


def _short(
    buf: bytes, p: int, dw: int, pc: int, data: list[tuple[int, str]], pc_full: int
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """A struct written by an older schema (or a null one): missing fields are zero."""
    end = dw * 8
    dvals = tuple(
        struct.unpack_from("<" + fmt, buf, p + off)[0]
        if off + struct.calcsize("<" + fmt) <= end
        else struct.unpack("<" + fmt, bytes(struct.calcsize("<" + fmt)))[0]  # 0, 0.0
        for off, fmt in data
    )
    have = min(pc, pc_full)
    words = struct.unpack_from(f"<{have}Q", buf, p + end) if have else ()
    return dvals, tuple(words) + (0,) * (pc_full - have)


def _list_struct(buf: bytes, at: int, w: int, lim: int, read: Reader) -> tuple[Any, ...]:
    if not w:
        return ()
    p, count, dw, pc = _composite(buf, at, w, lim)
    size = (dw + pc) * 8
    return tuple([read(buf, p + i * size, dw, pc, lim) for i in range(count)])


# --- entries ----------------------------------------------------------------------------------


_EVENTS: tuple[int, int, dict[int, Reader]] | None = None


def _event_readers() -> tuple[int, int, dict[int, Reader]]:
    """(discriminant byte offset, at's byte offset, {union ordinal: reader}), made once."""
    global _EVENTS
    node = _nodes()["Event"]
    by_field = {lower_first(cls.__name__): cls for cls in EVENT_TYPES}
    readers: dict[int, Reader] = {}
    at_offset = 0
    for f in node.struct.fields:
        name = str(f.name)
        if name == "at":
            at_offset = int(f.slot.offset) * 8
        else:
            readers[int(f.discriminantValue)] = reader_for(by_field[name])
    _EVENTS = int(node.struct.discriminantOffset) * 2, at_offset, readers
    return _EVENTS


def _root(data: bytes | memoryview) -> tuple[int, int, int, int]:
    """(root data start, data words, pointers, segment end) of a single-segment message."""
    if len(data) < 16:
        raise Fallback
    segments_minus_1, words = _HEADER.unpack_from(data, 0)
    lim = 8 + words * 8
    if segments_minus_1 or lim > len(data):
        raise Fallback
    p, dw, pc = _struct(_WORD.unpack_from(data, 8)[0], 8, lim)
    return p, dw, pc, lim


def peek_entry(data: bytes | memoryview) -> tuple[int, int]:
    """(seq, epoch) of a WAL entry without decoding its event; raises `Fallback`."""
    p, dw, _pc, _lim = _root(data)
    if dw < 2:
        raise Fallback
    return _SEQ_EPOCH.unpack_from(data, p)


def read_entry(data: bytes) -> tuple[int, int, Any]:
    """(seq, epoch, event) of a WAL entry; raises one of `FAST_REJECTS` on a message the
    caller must hand to the reference reader (for its result, or its verdict).

    The three hops (root, `Event`, its union member) are struct pointers a builder always
    writes forward; they are followed inline, with `_struct`'s checks."""
    if len(data) < 24:
        raise Fallback
    head, w = _HEAD.unpack_from(data, 0)
    lim = 8 + (head >> 32) * 8
    if head & 0xFFFFFFFF or lim > len(data) or w & 0x80000003:  # one segment, forward ptr
        raise Fallback
    p = 16 + ((w & 0x7FFFFFFC) << 1)
    dw, pc = (w >> 32) & 0xFFFF, w >> 48
    if dw < 2 or pc < 1 or p + (dw + pc) * 8 > lim:
        raise Fallback
    seq, epoch = _SEQ_EPOCH.unpack_from(data, p)
    at = p + dw * 8
    w = _WORD.unpack_from(data, at)[0]
    disc_at, at_at, readers = _EVENTS or _event_readers()
    ep = at + 8 + ((w & 0x7FFFFFFC) << 1)
    edw, epc = (w >> 32) & 0xFFFF, w >> 48
    if (
        w & 0x80000003
        or edw * 8 < max(disc_at + 2, at_at + 8)
        or epc < 1
        or ep + (edw + epc) * 8 > lim
    ):
        raise Fallback
    read = readers.get(_UNION.unpack_from(data, ep + disc_at)[0])
    if read is None:
        raise Fallback
    at = ep + edw * 8
    mp, mdw, mpc = _struct(_WORD.unpack_from(data, at)[0], at, lim)
    return seq, epoch, read(data, mp, mdw, mpc, lim, _FLOAT64.unpack_from(data, ep + at_at)[0])


# What the fast reader raises on a message it does not handle (bounds, encodings, text, enum
# values): never `GenerationError`, which is a bug and must not be hidden by the fallback.
FAST_REJECTS = (Fallback, struct.error, ValueError, TypeError, IndexError, KeyError, OverflowError)
