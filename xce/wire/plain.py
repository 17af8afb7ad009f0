"""Records as plain tuples for checkpoints: the bulk path where speed matters.

A checkpoint of a million jobs through per-field Cap'n Proto accessors takes ~30 us a job to
read back; the same records as nested tuples of str/int/float take a few microseconds. The
field plans are the ones that generated the Cap'n Proto schema, so both forms carry the same
fields in the same order. Equal job specs are stored once per chunk and shared after loading.

How a chunk of tuples becomes bytes is xce/wire/packing.py: versioned msgpack, and the
`marshal` layout of older checkpoints still read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xce.core.arrayspec import IndexSet
from xce.core.model import JobRecord, JobSpec
from xce.wire import packing
from xce.wire.schema import FieldPlan, plans

_PLANS: dict[type, list[FieldPlan]] = {}


def _plans(cls: type) -> list[FieldPlan]:
    found = _PLANS.get(cls)
    if found is None:
        found = _PLANS[cls] = plans(cls)
    return found


def to_plain(obj: Any, given: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """`obj` as nested tuples; fields named in `given` take that value as it is."""
    out: list[Any] = []
    for f in _plans(type(obj)):
        if given is not None and f.py in given:
            out.append(given[f.py])
            continue
        value = getattr(obj, f.py)
        kind = f.kind
        if kind in ("scalar", "opt"):
            out.append(value)
        elif kind == "enum":
            out.append(value.value)
        elif kind == "struct":
            out.append(to_plain(value))
        elif kind == "optstruct":
            out.append(None if value is None else to_plain(value))
        elif kind in ("list_text", "list_kv"):
            out.append(tuple(value))
        elif kind == "list_struct":
            out.append(tuple(to_plain(v) for v in value))
        elif kind == "indexset":
            out.append(tuple((r.start, r.stop, r.step) for r in value.ranges))
    return tuple(out)


Converter = Callable[[Any], Any]
_CONVERTERS: dict[type, list[tuple[int, Converter]]] = {}


def _converter(f: FieldPlan) -> Converter | None:
    """How to turn a field's plain value back; None where the decoder already gives it."""
    kind, t = f.kind, f.py_type
    if kind == "enum":
        return t._value2member_map_.__getitem__  # fast path
    if kind == "struct":
        return lambda v: from_plain(t, v)
    if kind == "optstruct":
        return lambda v: None if v is None else from_plain(t, v)
    if kind == "list_struct":
        return lambda v: tuple([from_plain(t, x) for x in v]) if v else ()
    if kind == "indexset":
        return lambda v: IndexSet(tuple(range(*r) for r in v))
    return None  # scalars, optionals, tuples of text and of pairs come back as they went


def from_plain(cls: type, data: tuple[Any, ...], given: dict[int, Any] | None = None) -> Any:
    """Positional construction (the plans follow the dataclass field order); fields whose
    index is in `given` take that value as it is."""
    converters = _CONVERTERS.get(cls)
    if converters is None:
        converters = _CONVERTERS[cls] = [
            (i, c) for i, f in enumerate(_plans(cls)) if (c := _converter(f)) is not None
        ]
    if not converters and not given:
        return cls(*data)
    values = list(data)
    n = len(values)
    for i, convert in converters:
        if i >= n:  # a row from before this field was appended: its default applies
            break
        values[i] = given[i] if given and i in given else convert(values[i])
    return cls(*values)


_BUILDERS: dict[tuple[type, int | None], Callable[..., Any]] = {}


def _builder(cls: type, given: int | None = None) -> Callable[..., Any]:
    """`build(row, value=None)`: `from_plain(cls, row, {given: value})` generated as one
    expression per field (no per-row list, loop or dict), for rows with every field; a
    shorter row (a checkpoint from before fields were appended) takes `from_plain`."""
    found = _BUILDERS.get((cls, given))
    if found is not None:
        return found
    env: dict[str, Any] = {"cls": cls, "from_plain": from_plain, "IndexSet": IndexSet}
    args = []
    fields = _plans(cls)
    for i, f in enumerate(fields):
        v = f"row[{i}]"
        env[f"T{i}"] = f.py_type
        if i == given:
            args.append("value")
        elif f.kind == "enum":
            env[f"E{i}"] = f.py_type._value2member_map_
            args.append(f"E{i}[{v}]")
        elif f.kind == "struct":
            args.append(f"from_plain(T{i}, {v})")
        elif f.kind == "optstruct":
            args.append(f"(None if {v} is None else from_plain(T{i}, {v}))")
        elif f.kind == "list_struct":
            args.append(f"(tuple([from_plain(T{i}, x) for x in {v}]) if {v} else ())")
        elif f.kind == "indexset":
            args.append(f"IndexSet(tuple([range(*r) for r in {v}]))")
        else:
            args.append(v)
    slow = "from_plain(cls, row)" if given is None else f"from_plain(cls, row, {{{given}: value}})"
    code = (
        f"def build(row, value=None):\n"
        f"    if len(row) != {len(fields)}:\n        return {slow}\n"
        f"    return cls({', '.join(args)})"
    )
    exec(compile(code, f"<xce.wire.plain {cls.__name__}>", "exec"), env)
    found = _BUILDERS[(cls, given)] = env["build"]
    return found


def pack_records(records: list[Any]) -> bytes:
    """A chunk of records of one type; job specs are shared through a table."""
    if records and isinstance(records[0], JobRecord):
        # Keyed by value: equal specs (every plain `submit -- true`) are stored, decoded and
        # then held in memory once.
        specs: dict[Any, int] = {}
        table: list[tuple[Any, ...]] = []
        rows = []
        for job in records:
            key = job.spec
            if key not in specs:
                specs[key] = len(table)
                table.append(to_plain(job.spec))
            rows.append(to_plain(job, {"spec": specs[key]}))
        return packing.pack(("jobs", tuple(table), tuple(rows)))
    return packing.pack(("records", None, tuple(to_plain(r) for r in records)))


def unpack_records(cls: type, data: bytes) -> list[Any]:
    """The records of one packed chunk (either format: xce/wire/packing.py)."""
    kind, table, rows = packing.unpack(cls, data)
    if kind != "jobs":
        build = _builder(cls)
        return [build(row) for row in rows]
    specs = [from_plain(JobSpec, s) for s in table]
    spec_i = [f.py for f in _plans(JobRecord)].index("spec")
    build = _builder(JobRecord, spec_i)
    return [build(row, specs[row[spec_i]]) for row in rows]
