"""Typed config tables: msgspec decodes them, this module words the errors.

Every TOML table is one msgspec `Struct` (subclass `Table`: unknown keys refused). msgspec
reports a problem as `Expected `int`, got `str` - at `$.queue[0].priority``; `convert`
turns that into today's wording (`queue[0].priority must be a int, got 'high'`), in this one
place, from the declared type and the raw value. A field can sharpen its message with
`Meta(extra=...)`: `error` replaces any message at or below it, `hint` the message of a
broken constraint (`must be HOST:PORT`, then `, got <value>`). Cross-field rules raise
`Invalid` from `__post_init__`, worded relative to their table.

msgspec (0.23) over pydantic: one validation library across the project, and the API bodies
use it too.
"""

from __future__ import annotations

import enum
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import msgspec

from xce.core.errors import InvalidRequest

T = TypeVar("T")


class ConfigError(InvalidRequest):
    """A config file is unreadable or has a bad key; the message names file and key."""

    code = "config_error"


class Table(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One TOML table: strict types, unknown keys refused, frozen because settings extend
    tables (xce/config_settings.py). mypy reads `frozen` per class: every subclass repeats
    it."""


class Invalid(ValueError):
    """A rule across keys, raised in `__post_init__`: `text` names the key relative to the
    table (`listen must be HOST:PORT`); `whole` words it about the table (`queue[0]: ...`)."""

    def __init__(self, text: str, *, whole: bool = False) -> None:
        super().__init__(text)
        self.text, self.whole = text, whole


PosInt = Annotated[int, msgspec.Meta(gt=0)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]  # ints are accepted (and become floats)
PosNumber = PosInt | PosFloat  # an int stays an int


def error(text: str, *, got: bool = False) -> msgspec.Meta:
    """`Annotated[kind, error("must be a list of host names")]`: every problem at or below
    this field reads `<key> <text>`; with `got`, `<key> <text>, got <the key's value>` (the
    wording these keys had before the tables)."""
    return msgspec.Meta(extra={"error": text, "got": True} if got else {"error": text})


def hint(text: str, **constraint: Any) -> msgspec.Meta:
    """`Annotated[int, hint("must be 0 or more", ge=0)]`: the constraint (msgspec.Meta's
    keywords), and its breach reads `<key> <text>, got <value>`."""
    return msgspec.Meta(**constraint, extra={"hint": text})


def required(text: str = "is required") -> msgspec.Meta:
    """`Annotated[str, required()]`: a missing key reads `<key> is required` (the default
    wording is `<key> must be a str, got None`)."""
    return msgspec.Meta(extra={"missing": text})


def convert(data: Any, kind: type[T], where: str = "") -> T:
    """`data` (parsed TOML) as `kind`; a `ConfigError` naming the key when it is not one.
    `where` prefixes the keys when `data` is one table of the file (`auth`)."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(_message(exc, data, kind, where)) from None


def values(table: msgspec.Struct, keys: type[msgspec.Struct]) -> dict[str, Any]:
    """The keys of `keys` (a base of the table's type) as `table` holds them: what a settings
    Struct that extends the same base takes as written."""
    return {name: getattr(table, name) for name in keys.__struct_fields__}


_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>.*)`)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _walk(
    path: str, data: Any, kind: Any, where: str
) -> tuple[str, Any, Any, tuple[str, str] | None]:
    """Where msgspec's path leads: the key's name, its declared type, the value in the file
    and the deepest `error` text on the way (with the key it belongs to, and that key's
    value when the `error` asks for it)."""
    names, tp, value = where, kind, data
    error: tuple[str, str] | None = None
    for step in _STEP.finditer(path):
        key, index = step.groups()
        tp = _strip(tp)
        if key is not None:
            tp = _field_type(tp, key)
            value = value.get(key) if isinstance(value, Mapping) else None
            names = f"{names}.{key}" if names else key
        elif index == "...":  # a dict's value: find which one msgspec refused
            value_tp = get_args(tp)[1]
            key = next((k for k, v in value.items() if not _fits(v, value_tp)), "...")
            tp, value, names = value_tp, value.get(key), f"{names}.{key}"
        else:
            tp, value = _item_type(tp, int(index)), value[int(index)]
            names = f"{names}[{index}]"
        if text := _meta(tp, "error"):
            error = (names, f"{text}, got {value!r}" if _meta(tp, "got") else text)
    return names, tp, value, error


def _message(exc: msgspec.ValidationError, data: Any, kind: Any, where: str) -> str:
    match = _AT.match(str(exc))
    assert match is not None
    what = match["what"]
    names, tp, value, error = _walk(match["path"] or "", data, kind, where)
    cause = exc.__cause__
    if isinstance(cause, Invalid):  # a rule of __post_init__, worded relative to its table
        if not names:
            return cause.text
        return f"{names}: {cause.text}" if cause.whole else f"{names}.{cause.text}"
    if cause is not None:  # any other ValueError or TypeError of a __post_init__
        return f"{names}: {cause}" if names else str(cause)
    if error is not None:
        return " ".join(error)
    if what.startswith("Object contains unknown field"):
        allowed = ", ".join(sorted(f.encode_name for f in msgspec.structs.fields(_strip(tp))))
        return f"unknown key {names or '(top level)'}.{what.split('`')[1]} (allowed: {allowed})"
    if what.startswith("Object missing required field"):
        key = what.split("`")[1]
        names, tp, value = f"{names}.{key}" if names else key, _field_type(_strip(tp), key), None
        if text := _meta(tp, "missing"):
            return f"{names} {text}"
    elif not re.match(r"Expected `[^`]*`(,| got)|Invalid enum value", what):
        return f"{names} {_meta(tp, 'hint') or _bound(tp)}, got {value!r}"  # a constraint
    if isinstance(value, bool) and what.endswith("got `bool`"):
        return f"{names} must be {_expected(tp)}, not a boolean"
    return f"{names} must be {_expected(tp)}, got {value!r}"


def _fits(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def _strip(tp: Any) -> Any:
    """The type under `Annotated` and `| None`."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif _optional(tp) is not tp:
            tp = _optional(tp)
        else:
            return tp


def _optional(tp: Any) -> Any:
    """`X` of `X | None`."""
    if _is_union(tp) and len(args := [a for a in get_args(tp) if a is not type(None)]) == 1:
        return args[0]
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (typing.Union, types.UnionType)


def _field_type(tp: Any, key: str) -> Any:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return next(f.type for f in msgspec.structs.fields(tp) if f.encode_name == key)
    return get_args(tp)[1] if get_origin(tp) is dict else Any


def _item_type(tp: Any, index: int) -> Any:
    args = get_args(tp)
    if get_origin(tp) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return args[index]
    return args[0] if args else Any


def _meta(tp: Any, key: str) -> str | None:
    """The `extra[key]` of a `Meta` on `tp` itself (not inside it)."""
    tp = _optional(tp)
    while get_origin(tp) is Annotated:
        for meta in get_args(tp)[1:]:
            if isinstance(meta, msgspec.Meta) and meta.extra and key in meta.extra:
                return str(meta.extra[key])
        tp = get_args(tp)[0]
    return None


def _bound(tp: Any) -> str:
    tp = _optional(tp)
    parts = get_args(tp) if _is_union(tp) else (tp,)
    metas = [m for part in parts for m in get_args(part)[1:] if isinstance(m, msgspec.Meta)]
    for meta in metas:
        if meta.gt == 0:
            return "must be positive"
        if meta.ge is not None:
            return f"must be at least {meta.ge:g}"
    return "is not valid"


def _expected(tp: Any) -> str:
    """How today's messages name a type: `a int`, `a int or float`, `always or interval`."""
    tp = _strip(tp)
    if get_origin(tp) is Literal:
        return _one_of([str(v) for v in get_args(tp)])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _one_of([str(m.value) for m in tp])
    if _is_union(tp):
        parts = [_strip(a) for a in get_args(tp) if a is not type(None)]
        if float in parts and int in parts:  # a float field accepts ints anyway
            parts.remove(int)
        return " or ".join(_expected(a) for a in parts)
    if tp is float:
        return "a int or float"
    origin = get_origin(tp) or tp
    if isinstance(origin, type) and issubclass(origin, dict | msgspec.Struct):
        return "a dict"
    if origin in (list, tuple):
        return "a list"
    return f"a {getattr(tp, '__name__', tp)}"


def _one_of(values: list[str]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]
