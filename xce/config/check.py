"""Typed config tables: msgspec decodes them, xce/core/validation.py words the errors.

Every TOML table is one msgspec `Struct` (subclass `Table`: unknown keys refused). msgspec
reports a problem as `Expected `int`, got `str` - at `$.queue[0].priority``; the shared
translator turns that into today's wording (`queue[0].priority must be a int, got 'high'`),
with the admin's vocabulary below (the declared type and the value as written). A field can
sharpen its message with `Meta(extra=...)`: `error` replaces any message at or below it,
`hint` the message of a broken constraint (`must be HOST:PORT`, then `, got <value>`),
`required` that of a missing key. Cross-field rules raise `Invalid` from `__post_init__`,
worded relative to their table.

msgspec (0.23) over pydantic: one validation library across the project, and the API bodies
use it too.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import msgspec

from xce.core import validation
from xce.core.errors import ConfigError

T = TypeVar("T")


class Table(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One TOML table: strict types, unknown keys refused, frozen because settings extend
    tables (xce/config/settings.py). mypy reads `frozen` per class: every subclass repeats
    it."""


PosInt = Annotated[int, msgspec.Meta(gt=0)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]  # ints are accepted (and become floats)
PosNumber = PosInt | PosFloat  # an int stays an int


def convert(data: Any, kind: type[T], where: str = "") -> T:
    """`data` (parsed TOML) as `kind`; a `ConfigError` naming the key when it is not one.
    `where` prefixes the keys when `data` is one table of the file (`auth`)."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(validation.explain(exc, data, kind, where, _ADMIN)) from None


def values(table: msgspec.Struct, keys: type[msgspec.Struct]) -> dict[str, Any]:
    """The keys of `keys` (a base of the table's type) as `table` holds them: what a settings
    Struct that extends the same base takes as written."""
    return {name: getattr(table, name) for name in keys.__struct_fields__}


class _AdminWording(validation.Wording):
    """The config's words: the declared type and the value as the file wrote it."""

    def unknown(self, spot: validation.Spot, key: str, allowed: list[str]) -> str:
        return f"unknown key {spot.names or '(top level)'}.{key} (allowed: {', '.join(allowed)})"

    def missing(self, spot: validation.Spot) -> str:
        return f"{spot.names} must be {_expected(spot.tp)}, got None"

    def refused(self, msg: str, spot: validation.Spot) -> str:
        names, value = spot.names, spot.value
        if not re.match(r"Expected `[^`]*`(,| got)|Invalid enum value", msg):  # a constraint
            return f"{names} {validation.meta(spot.tp, 'hint') or _bound(spot.tp)}, got {value!r}"
        if isinstance(value, bool) and msg.endswith("got `bool`"):
            return f"{names} must be {_expected(spot.tp)}, not a boolean"
        return f"{names} must be {_expected(spot.tp)}, got {value!r}"


_ADMIN = _AdminWording()


def _bound(tp: Any) -> str:
    for one in validation.metas(tp):
        if one.gt == 0:
            return "must be positive"
        if one.ge is not None:
            return f"must be at least {one.ge:g}"
    return "is not valid"


def _expected(tp: Any) -> str:
    """How today's messages name a type: `a int`, `a int or float`, `always or interval`."""
    parts = validation.members(tp)
    if len(parts) > 1:
        if float in parts and int in parts:  # a float field accepts ints anyway
            parts.remove(int)
        return " or ".join(_expected(a) for a in parts)
    tp = parts[0]
    if get_origin(tp) is Literal:
        return _one_of([str(v) for v in get_args(tp)])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _one_of([str(m.value) for m in tp])
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
