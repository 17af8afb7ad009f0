"""A fast writer for WAL entries: the bytes pycapnp's builder produces, without pycapnp.

Every committed event is encoded on the event loop before it is applied
(`WalWriter.prepare`), and the reflective builder (`codec._fill`: a pycapnp attribute set per
field, a Python -> C++ crossing each) cost ~10 us of a submit. As `fast.py` does for reading,
each struct type here gets one generated function (field offsets from the compiled schema,
fields from the same plans that generated it) that lays the message out as a list of byte
chunks, in exactly the order the builder allocates: a struct when it is initialised, a text
when it is set, list elements in order, depth first. The bytes are the builder's, byte for
byte (a test compares them on every event type and on random records), so nothing about the
log's format changes.

Only what the builder would write the same way is handled: values of exactly the declared
Python type, text without NUL, a message within pycapnp's first segment (1,024 words; the
builder splits a longer one into segments). Anything else raises one of `WRITE_REJECTS`,
and `encode_entry` (the caller) uses the reference builder, which also owns the `WireError`s
for values the schema cannot hold.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from xce.core.arrayspec import IndexSet
from xce.core.events import Event
from xce.wire.fast import Fallback, _layout, _nodes
from xce.wire.schema import lower_first, plans
from xce.wire.types import EVENT_TYPES

FIRST_SEGMENT_WORDS = 1024  # capnp's SUGGESTED_FIRST_SEGMENT_WORDS, pycapnp's first segment
_PAD = [bytes(i) for i in range(9)]
_WORD = struct.Struct("<Q")
_RANGE = struct.Struct("<qqq")
_SIZES = {"int64": ("q", 8), "float64": ("d", 8)}
# What a generated writer raises where the reference builder must decide.
WRITE_REJECTS = (Fallback, struct.error, UnicodeEncodeError, OverflowError)

Writer = Callable[[list[bytes], int, int, Any], tuple[int, bytes]]


def _size(name: str) -> tuple[int, int]:
    node = _nodes()[name]
    return int(node.struct.dataWordCount), int(node.struct.pointerCount)


def _text_lines(v: str, ref: str, out: str, indent: str) -> list[str]:
    """Code that appends text `v` for the pointer at word `ref` and sets `out` to the
    pointer word. The builder writes len + 1 bytes (a NUL) padded to whole words."""
    return [
        f"{indent}if {v}.__class__ is not str or '\\0' in {v}: raise Fallback",
        f"{indent}b = {v}.encode()",
        f"{indent}n = len(b) + 1",
        f"{indent}{out} = 1 | ((pos - ({ref}) - 1) << 2) | 0x200000000 | (n << 35)",
        f"{indent}chunks.append(b)",
        f"{indent}chunks.append(PAD[8 - (len(b) & 7)])",
        f"{indent}pos += (n + 7) >> 3",
    ]


_WRITERS: dict[type, Writer] = {}


def writer_for(cls: type) -> Writer:
    """`fill(chunks, pos, at, obj) -> (pos, struct bytes)` for a struct at word `at`: its
    children are appended to `chunks` from word `pos` on; the caller places the bytes."""
    found = _WRITERS.get(cls)
    if found is None:
        found = _WRITERS[cls] = _generate(cls)
    return found


def _generate(cls: type) -> Writer:
    is_event = cls in EVENT_TYPES
    dw, pc, slots = _layout(cls)
    env: dict[str, Any] = {"Fallback": Fallback, "PAD": _PAD, "WORD": _WORD, "RANGE": _RANGE}
    body: list[str] = []
    data: list[tuple[int, str, str]] = []  # (byte offset, format, expression)
    bools: dict[int, list[tuple[int, str]]] = {}  # byte -> [(bit, variable)]
    ptrs = ["0"] * pc
    for i, f in enumerate(plans(cls, ("at",) if is_event else ())):
        ctype, offset = slots[f.cap]
        v = f"v{i}"
        body.append(f"    {v} = obj.{f.py}")
        ref = f"at + {dw + offset}"
        p = f"p{offset}"
        kind = f.kind
        if kind == "scalar" and ctype == "bool":
            body.append(f"    if {v}.__class__ is not bool: raise Fallback")
            bools.setdefault(offset >> 3, []).append((offset & 7, v))
        elif kind == "scalar" and ctype in _SIZES:
            fmt, size = _SIZES[ctype]
            want = "int" if ctype == "int64" else "float"
            body.append(f"    if {v}.__class__ is not {want}: raise Fallback")
            data.append((offset * size, fmt, v))
        elif kind == "scalar" and ctype == "text":
            body += _text_lines(v, ref, p, "    ")
            ptrs[offset] = p
        elif kind == "enum":
            env[f"E{i}"] = f.py_type
            body.append(f"    if {v}.__class__ is not E{i}: raise Fallback")
            body.append(f"    {v} = {v}.value")
            body += _text_lines(v, ref, p, "    ")
            ptrs[offset] = p
        elif kind == "opt":
            inner = {int: "OptInt", float: "OptFloat", str: "OptText"}[f.py_type]
            odw, opc = _size(inner)
            body.append(f"    if {v} is None:")
            body.append(f"        {p} = 0")
            body.append("    else:")
            body.append(f"        {p} = ((pos - ({ref}) - 1) << 2) | {(odw << 32) | (opc << 48)}")
            if f.py_type is str:  # OptText: one pointer word, then the text
                body.append("        q = pos")
                body.append("        pos += 1")
                body.append("        k = len(chunks)")
                body.append("        chunks.append(b'')")
                body += _text_lines(v, "q", "t", "        ")
                body.append("        chunks[k] = WORD.pack(t)")
            else:
                want = "int" if f.py_type is int else "float"
                fmt = "<q" if f.py_type is int else "<d"
                env[f"S{i}"] = struct.Struct(fmt)
                body.append(f"        if {v}.__class__ is not {want}: raise Fallback")
                body.append(f"        chunks.append(S{i}.pack({v}))")
                body.append("        pos += 1")
            ptrs[offset] = p
        elif kind in ("struct", "optstruct"):
            sdw, spc = _size(f.py_type.__name__)
            env[f"C{i}"] = f.py_type
            env[f"W{i}"] = writer_for(f.py_type)
            pad = "    "
            if kind == "optstruct":
                body.append(f"    if {v} is None:")
                body.append(f"        {p} = 0")
                body.append("    else:")
                pad = "        "
            if not sdw and not spc:  # pragma: no cover - every struct has fields
                raise Fallback
            body.append(f"{pad}if {v}.__class__ is not C{i}: raise Fallback")
            body.append(f"{pad}{p} = ((pos - ({ref}) - 1) << 2) | {(sdw << 32) | (spc << 48)}")
            body.append(f"{pad}k = len(chunks)")
            body.append(f"{pad}chunks.append(b'')")
            body.append(f"{pad}s = pos")
            body.append(f"{pad}pos += {sdw + spc}")
            body.append(f"{pad}pos, chunks[k] = W{i}(chunks, pos, s, {v})")
            ptrs[offset] = p
        elif kind == "list_text":
            body.append(f"    if {v}.__class__ is not tuple: raise Fallback")
            body.append(f"    n{i} = len({v})")
            body.append(f"    {p} = 1 | ((pos - ({ref}) - 1) << 2) | 0x600000000 | (n{i} << 35)")
            body.append(f"    if n{i}:")
            body.append("        k = len(chunks)")
            body.append("        chunks.append(b'')")
            body.append("        s = pos")
            body.append(f"        pos += n{i}")
            body.append("        words = []")
            body.append(f"        for j, x in enumerate({v}):")
            body += _text_lines("x", "s + j", "t", "            ")
            body.append("            words.append(t)")
            body.append(f"        chunks[k] = struct.pack(f'<{{n{i}}}Q', *words)")
            env["struct"] = struct
            ptrs[offset] = p
        elif kind in ("list_kv", "list_struct", "indexset"):
            name = {"list_kv": "KeyValue", "indexset": "Range"}.get(kind) or f.py_type.__name__
            edw, epc = _size(name)
            size = edw + epc
            items = f"{v}.ranges" if kind == "indexset" else v
            want = "IndexSet" if kind == "indexset" else "tuple"
            env["IndexSet"] = IndexSet
            body.append(f"    if {v}.__class__ is not {want}: raise Fallback")
            body.append(f"    n{i} = len({items})")
            body.append(
                f"    {p} = 1 | ((pos - ({ref}) - 1) << 2) | 0x700000000 | ((n{i} * {size}) << 35)"
            )
            body.append("    k = len(chunks)")
            body.append("    chunks.append(b'')")
            body.append(f"    tag = WORD.pack((n{i} << 2) | {(edw << 32) | (epc << 48)})")
            body.append("    s = pos + 1")
            body.append(f"    pos += 1 + n{i} * {size}")
            body.append("    parts = [tag]")
            body.append(f"    for j, x in enumerate({items}):")
            if kind == "indexset":
                body.append("        parts.append(RANGE.pack(x.start, x.stop, x.step))")
            elif kind == "list_kv":
                body.append("        if x.__class__ is not tuple or len(x) != 2: raise Fallback")
                body.append("        e = s + j * 2")
                body.append("        y = x[0]")
                body += _text_lines("y", "e", "t0", "        ")
                body.append("        y = x[1]")
                body += _text_lines("y", "e + 1", "t1", "        ")
                body.append("        parts.append(WORD.pack(t0) + WORD.pack(t1))")
            else:
                env[f"C{i}"] = f.py_type
                env[f"W{i}"] = writer_for(f.py_type)
                body.append(f"        if x.__class__ is not C{i}: raise Fallback")
                body.append(f"        pos, b = W{i}(chunks, pos, s + j * {size}, x)")
                body.append("        parts.append(b)")
            body.append("    chunks[k] = b''.join(parts)")
            ptrs[offset] = p
        else:  # pragma: no cover - plans() only produces the kinds above
            raise Fallback
    # The struct's own bytes: data words (fields at their offsets, bools or-ed into bytes),
    # then the pointer words.
    for byte, bits in bools.items():
        expr = " | ".join(f"({var} << {bit})" for bit, var in bits)
        data.append((byte, "B", expr))
    data.sort()
    fmt, pos = "<", 0
    for off, f_, _ in data:
        if off > pos:
            fmt += f"{off - pos}x"
        fmt += f_
        pos = off + struct.calcsize("<" + f_)
    if dw * 8 > pos:
        fmt += f"{dw * 8 - pos}x"
    fmt += "Q" * pc
    env["PACK"] = struct.Struct(fmt)
    args = ", ".join([e for _, _, e in data] + ptrs)
    lines = ["def fill(chunks, pos, at, obj):", *body, f"    return pos, PACK.pack({args})"]
    code = "\n".join(lines)
    exec(compile(code, f"<xce.wire.fast_write {cls.__name__}>", "exec"), env)
    return env["fill"]


@cache
def _event_layout() -> tuple[int, int, struct.Struct, dict[type, tuple[int, int, Writer]]]:
    """Event's (data words, pointers, its packer, {class: (ordinal, size words, writer)})."""
    node = _nodes()["Event"]
    edw, epc = int(node.struct.dataWordCount), int(node.struct.pointerCount)
    by_field = {lower_first(cls.__name__): cls for cls in EVENT_TYPES}
    members: dict[type, tuple[int, int, Writer]] = {}
    at_byte = 0
    for f in node.struct.fields:
        name = str(f.name)
        if name == "at":
            at_byte = int(f.slot.offset) * 8
        else:
            if int(f.slot.offset) != 0:  # pragma: no cover - a union of structs shares ptr 0
                raise Fallback
            cls = by_field[name]
            dw, pc = _size(cls.__name__)
            members[cls] = (int(f.discriminantValue), dw | (pc << 16), writer_for(cls))
    disc_byte = int(node.struct.discriminantOffset) * 2
    fields = sorted([(at_byte, "d"), (disc_byte, "H")])
    fmt, pos = "<", 0
    for off, f_ in fields:
        fmt += (f"{off - pos}x" if off > pos else "") + f_
        pos = off + struct.calcsize("<" + f_)
    fmt += f"{edw * 8 - pos}x" + "Q" * epc
    order = [name for _, name in sorted([(at_byte, "at"), (disc_byte, "disc")])]
    if order != ["at", "disc"] or epc != 1 or _size("WalEntry") != (2, 1):
        raise Fallback  # pragma: no cover - the layout this module was written for
    return edw, epc, struct.Struct(fmt), members


_ENTRY = struct.Struct("<IIQQQQ")  # segment table, root pointer, WalEntry {seq, epoch, event}


def encode_entry_fast(seq: int, epoch: int, event: Event) -> bytes:
    """`codec.encode_entry(seq, epoch, event)`'s bytes; raises one of `WRITE_REJECTS` where
    the caller must use the reference builder."""
    edw, epc, event_pack, members = _EVENT or _event_layout_once()
    member = members.get(event.__class__)
    at = event.at
    if member is None or at.__class__ is not float:
        raise Fallback
    ordinal, size, fill = member
    mdw, mpc = size & 0xFFFF, size >> 16
    # Words: 0 root pointer, 1-3 WalEntry, 4.. Event, then the member struct, then children.
    estart = 4
    mstart = estart + edw + epc
    chunks: list[bytes] = []
    pos, member_bytes = fill(chunks, mstart + mdw + mpc, mstart, event)
    if pos > FIRST_SEGMENT_WORDS:
        raise Fallback  # the builder would have opened a second segment
    event_ptr = ((mstart - (estart + edw) - 1) << 2) | (mdw << 32) | (mpc << 48)
    head = _ENTRY.pack(0, pos, (2 << 32) | (1 << 48), seq, epoch, (edw << 32) | (epc << 48))
    return b"".join([head, event_pack.pack(at, ordinal, event_ptr), member_bytes, *chunks])


_EVENT: tuple[int, int, struct.Struct, dict[type, tuple[int, int, Writer]]] | None = None


def _event_layout_once() -> tuple[int, int, struct.Struct, dict[type, tuple[int, int, Writer]]]:
    global _EVENT
    _EVENT = _event_layout()
    return _EVENT
