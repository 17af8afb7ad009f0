"""msgspec's validation errors turned into one sentence that names the key and the value.

The config file (xce/config/check.py) and the API bodies (xce/protocol/decoding.py) are both
decoded by msgspec, which reports a problem as `Expected `int`, got `str` - at
`$.queue[0].priority``. `explain` is the one translator: it follows that path through the
data and the declared type, finds the key's name, its type and the value there, and
handles what both sides share (a Struct's own rule, a field's `error`/`required` wording,
unknown and missing keys). What each audience reads differs, so the last words come from a
`Wording`: admins know `queue[0].priority must be a int, got 'high'`, clients know
`body.slots must be integer, got str`, and those texts stay as they are.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

_WHERE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`(?: in `(?P<within>[^`]*)`)?)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(\.\.\.)\]")


class Invalid(ValueError):
    """A rule across keys, raised in a Struct's `__post_init__` (msgspec cannot state it).
    `text` names the key relative to the Struct (`listen must be HOST:PORT` reads
    `server.listen must be HOST:PORT`); `whole` words it about the Struct itself
    (`queue[0]: ...`)."""

    def __init__(self, text: str, *, whole: bool = False) -> None:
        super().__init__(text)
        self.relative = f": {text}" if whole else f".{text}"

    @classmethod
    def following(cls, relative: str) -> Invalid:
        """A rule whose text is appended to the Struct's path as it is: `.tags[1] repeats
        an earlier item`, ` needs at least 1 entry`."""
        invalid = cls(relative)
        invalid.relative = relative
        return invalid

    def at(self, names: str) -> str:
        return names + self.relative if names else self.relative.lstrip(".: ")


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
    """`Annotated[str, required()]`: a missing key reads `<key> is required`."""
    return msgspec.Meta(extra={"missing": text})


@dataclass(frozen=True)
class Spot:
    """Where msgspec's path leads: the key's printable name, its declared type (with its
    `Annotated` metadata) and the value the data holds there (None when absent)."""

    names: str
    tp: Any
    value: Any


class Wording:
    """How one audience reads the problems that are not a field's own wording; unknown and
    missing keys read the same to most."""

    def unknown(self, spot: Spot, key: str, allowed: list[str]) -> str:
        return f"{spot.names}.{key} is not a known field"

    def missing(self, spot: Spot) -> str:
        return f"{spot.names} is required"

    def refused(self, msg: str, spot: Spot) -> str:
        """msgspec's `msg` (wrong type, broken constraint, bad choice) about `spot`."""
        raise NotImplementedError


def explain(exc: msgspec.ValidationError, data: Any, kind: Any, root: str, words: Wording) -> str:
    """`exc` (from converting `data` to `kind`) as one sentence; `root` names the top."""
    found = _WHERE.match(str(exc))
    assert found is not None  # the pattern matches any text
    msg, at, within = found["msg"], found["at"], found["within"]
    if within is not None:  # a mapping's key is wrong: "at `key` in `$.containment`"
        spot, _ = _follow(within, data, kind, root)
        key = _first_refused(spot.value, _dict_args(spot.tp)[0], keys=True)
        return words.refused(msg, Spot(f"{spot.names} key {key[:64]!r}", str, key))
    spot, wording = _follow(at or "$", data, kind, root)
    if isinstance(exc.__cause__, Invalid):
        return exc.__cause__.at(spot.names)
    if exc.__cause__ is not None:  # any other error of a __post_init__
        return f"{spot.names}: {exc.__cause__}" if spot.names else str(exc.__cause__)
    if wording is not None:
        return wording
    if m := re.match(r"Object contains unknown field `(.*)`$", msg):
        struct = _struct(spot.tp)
        allowed = sorted(f.encode_name for f in msgspec.structs.fields(struct)) if struct else []
        return words.unknown(spot, m[1], allowed)
    if m := re.match(r"Object missing required field `(.*)`$", msg):
        names = f"{spot.names}.{m[1]}" if spot.names else m[1]
        spot = Spot(names, _field(spot.tp, m[1]), None)
        text = meta(spot.tp, "missing")
        return f"{names} {text}" if text else words.missing(spot)
    return words.refused(msg, spot)


def _follow(path: str, data: Any, kind: Any, root: str) -> tuple[Spot, str | None]:
    """`$.a[0][...]` -> the Spot of `a[0].KEY` (KEY: the first entry of the mapping whose
    value the declared type refuses) and the deepest `error` wording on the way."""
    tp, value, names = kind, data, root
    wording: str | None = None
    for name, index, _ in _STEP.findall(path):
        if name:
            tp, value = _field(tp, name), _get(value, name)
            names = f"{names}.{name}" if names else name
        elif index:
            tp, value, names = _item(tp, int(index)), _get(value, int(index)), f"{names}[{index}]"
        else:
            tp = _dict_args(tp)[1]
            key = _first_refused(value, tp, keys=False)
            value, names = _get(value, key), f"{names}.{key}"
        if text := meta(tp, "error"):
            wording = f"{names} {text}, got {value!r}" if meta(tp, "got") else f"{names} {text}"
    return Spot(names, tp, value), wording


def _get(value: Any, key: Any) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return None


def _first_refused(mapping: Any, tp: Any, *, keys: bool) -> str:
    """The first key of `mapping` whose key (or value) `tp` refuses."""
    for key, item in mapping.items() if isinstance(mapping, dict) else ():
        try:
            msgspec.convert(key if keys else item, tp, strict=True)
        except msgspec.ValidationError:
            return str(key)
    return "..."


def members(tp: Any) -> list[Any]:
    """The types a value of `tp` may have, without `Annotated` and `None`."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for t in typing.get_args(tp) if t is not type(None) for m in members(t)]
    return [tp]


def _struct(tp: Any) -> Any:
    return next(
        (m for m in members(tp) if isinstance(m, type) and issubclass(m, msgspec.Struct)), None
    )


def _field(tp: Any, name: str) -> Any:
    if struct := _struct(tp):
        return next((f.type for f in msgspec.structs.fields(struct) if f.encode_name == name), Any)
    return _dict_args(tp)[1]


def _item(tp: Any, index: int) -> Any:
    for member in members(tp):
        if typing.get_origin(member) in (list, tuple, set, frozenset):
            args = typing.get_args(member)
            return args[index] if len(args) > 1 and args[-1] is not Ellipsis else args[0]
    return Any


def _dict_args(tp: Any) -> tuple[Any, Any]:
    for member in members(tp):
        if typing.get_origin(member) is dict:
            key, value = typing.get_args(member)
            return key, value
    return Any, Any


def metas(tp: Any) -> list[msgspec.Meta]:
    """The `Meta`s on `tp` itself or on each type of its union (not inside them)."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    parts = typing.get_args(tp) if union else (tp,)
    return [m for p in parts for m in typing.get_args(p)[1:] if isinstance(m, msgspec.Meta)]


def meta(tp: Any, key: str) -> str | None:
    """The wording `extra[key]` a field declares (`error`, `hint`, `missing`)."""
    return next((str(m.extra[key]) for m in metas(tp) if m.extra and key in m.extra), None)
