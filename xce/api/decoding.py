"""Request bodies decoded straight into their msgspec Structs, with today's clear errors.

The fast path is one `msgspec.json.decode(raw, type=...)`: no intermediate dict, strict
types, unknown keys refused. Only when that fails is the body read again by the one JSON
reader (`xce.api.http.parse_json_text`: its messages for malformed, too deep or non-Unicode
bodies, and JSON Schema's rule that 2.0 is an integer), converted again, and msgspec's
error turned into a sentence that names the field path and the value, e.g.
`body.slots must be at least 1, got 0`.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, TypeVar

import msgspec

from xce.core.errors import InvalidRequest

T = TypeVar("T")

_WHERE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`(?: in `(?P<within>[^`]*)`)?)?$", re.S)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\[(\.\.\.)\]")
# msgspec's names of JSON types -> the words of the error messages clients already know
_TYPE_WORD = {
    "int": "integer",
    "float": "number",
    "str": "string",
    "bool": "boolean",
    "array": "array",
    "object": "object",
    "null": "null",
}
_GOT_WORD = {"array": "list", "object": "dict"}
_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")
_ANY_KEY = object()  # a path step into some value of a mapping (msgspec writes `[...]`)


def decode(raw: bytes, kind: type[T], parse: typing.Callable[[bytes], Any]) -> T:
    """`raw` as a `kind`; `parse` is the strict JSON reader used only after a failure."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    return convert(parse(raw), kind)


def convert(body: Any, kind: type[T]) -> T:
    """An already parsed body (e.g. one the guard read first) as a `kind`."""
    try:
        return msgspec.convert(body, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(explain(str(exc), body, kind)) from None


def refuse(relative: str) -> ValueError:
    """The error a Struct's `__post_init__` raises for a rule msgspec cannot state; the text
    follows the path of the Struct: ".preempt[1] repeats an earlier item" or
    " needs at least 1 field"."""
    return ValueError(relative)


def explain(error: str, body: Any, kind: Any) -> str:
    """msgspec's `error` about `body` as one sentence naming the field and the value."""
    found = _WHERE.match(error)
    assert found is not None  # the pattern matches any text
    msg, at, within = found.group("msg"), found.group("at"), found.group("within")
    if within is not None:  # a mapping's key is wrong: "at `key` in `$.containment`"
        where, value, tp = _follow(within, body, kind)
        key = _bad_key(value, _dict_args(tp)[0])
        return _sentence(msg, f"{where} key {key[:64]!r}", key, str)
    where, value, tp = _follow(at or "$", body, kind)
    return _sentence(msg, where, value, tp)


def _sentence(msg: str, where: str, value: Any, tp: Any) -> str:
    if m := re.match(r"Object missing required field `(.*)`$", msg):
        return f"{where}.{m.group(1)} is required"
    if m := re.match(r"Object contains unknown field `(.*)`$", msg):
        return f"{where}.{m.group(1)} is not a known field"
    if m := re.match(r"Expected `([^`]*)`, got `([^`]*)`$", msg):
        return f"{where} must be {_types(m.group(1))}, got {_GOT_WORD.get(m.group(2), m.group(2))}"
    if m := re.match(r"Expected `\w+` (>=|<=|>|<) (\S+)$", msg):
        word = {">=": "at least", "<=": "at most", ">": "more than", "<": "less than"}
        return f"{where} must be {word[m.group(1)]} {_number(m.group(2))}, got {value}"
    if m := re.match(r"Expected `(str|array|object)` of length (>=|<=) (\d+)$", msg):
        return where + _length(m.group(1), m.group(2) == "<=", int(m.group(3)))
    if m := re.match(r"Expected `str` matching regex '(.*)'$", msg, re.S):
        return f"{where} {value!r} does not match {m.group(1)}"
    if msg.startswith("Invalid enum value"):
        return f"{where} must be one of {', '.join(map(str, _choices(tp)))}"
    if msg == "Integer value out of range":
        return f"{where} is out of range, got {value}"
    if msg.startswith((".", " ")):  # a `refuse` from a Struct's own check
        return where + msg
    return f"{where}: {msg}"


def _length(kind: str, most: bool, n: int) -> str:
    if kind == "str":
        return f" is {'longer' if most else 'shorter'} than {n} characters"
    if kind == "array":
        return f" has more than {n} items" if most else f" needs at least {n} item{'s' * (n != 1)}"
    if most:
        return f" has more than {n} entries"
    return f" needs at least {n} {'entry' if n == 1 else 'entries'}"


def _types(expected: str) -> str:
    words = {_TYPE_WORD.get(t.strip(), t.strip()) for t in expected.split("|")}
    if "number" in words:
        words.discard("integer")
    return " or ".join(sorted(words, key=lambda w: _ORDER.index(w) if w in _ORDER else 99))


def _number(text: str) -> str:
    value = float(text)
    return str(int(value)) if value.is_integer() else text


def _follow(path: str, body: Any, kind: Any) -> tuple[str, Any, Any]:
    """`$.a[0][...]` -> ("body.a[0].KEY", the value there, its declared type), where KEY
    is the first entry of the mapping whose value the declared type refuses."""
    tp, value, where = kind, body, "body"
    for name, index, _ in _STEP.findall(path):
        if name:
            tp, value, where = _field(tp, name), _get(value, name), f"{where}.{name}"
        elif index:
            tp, value, where = _item(tp), _get(value, int(index)), f"{where}[{index}]"
        else:
            vtype = _dict_args(tp)[1]
            key = _bad_value(value, vtype)
            tp, value, where = vtype, _get(value, key), f"{where}.{key}"
    return where, value, tp


def _get(value: Any, key: Any) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return None


def _bad_value(mapping: Any, vtype: Any) -> str:
    for key, item in mapping.items() if isinstance(mapping, dict) else ():
        try:
            msgspec.convert(item, vtype, strict=True)
        except msgspec.ValidationError:
            return str(key)
    return "?"


def _bad_key(mapping: Any, ktype: Any) -> str:
    for key in mapping if isinstance(mapping, dict) else ():
        try:
            msgspec.convert(key, ktype, strict=True)
        except msgspec.ValidationError:
            return str(key)
    return "?"


def _plain(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _members(tp: Any) -> list[Any]:
    tp = _plain(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [_plain(t) for t in typing.get_args(tp)]
    return [tp]


def _field(tp: Any, name: str) -> Any:
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, msgspec.Struct):
            for info in msgspec.structs.fields(member):
                if info.encode_name == name:
                    return info.type
    return Any


def _item(tp: Any) -> Any:
    for member in _members(tp):
        if typing.get_origin(member) in (list, tuple, set, frozenset):
            return typing.get_args(member)[0]
    return Any


def _dict_args(tp: Any) -> tuple[Any, Any]:
    for member in _members(tp):
        if typing.get_origin(member) is dict:
            key, value = typing.get_args(member)
            return key, value
    return Any, Any


def _choices(tp: Any) -> list[Any]:
    for member in _members(tp):
        if typing.get_origin(member) is typing.Literal:
            return list(typing.get_args(member))
    return []
