"""Request bodies decoded straight into their msgspec Structs, with today's clear errors.

The fast path is one `msgspec.json.decode(raw, type=...)`: no intermediate dict, strict
types, unknown keys refused. Only when that fails is the body read again by the one JSON
reader (`xce.api.http.parse_json_text`: its messages for malformed, too deep or non-Unicode
bodies, and JSON Schema's rule that 2.0 is an integer), converted again, and msgspec's
error turned into a sentence that names the field path and the value, e.g.
`body.slots must be at least 1, got 0`, by the translator the config shares
(xce/core/validation.py), in the words of JSON Schema's types that clients already know.
"""

from __future__ import annotations

import re
import typing
from typing import Any, TypeVar

import msgspec

from xce.core.errors import InvalidRequest
from xce.core.validation import Invalid, Spot, Wording, explain, members

T = TypeVar("T")

# msgspec's names of JSON types -> the words of the error messages clients already know
_TYPE_WORD = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}
_GOT_WORD = {"array": "list", "object": "dict"}
_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")


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
        raise InvalidRequest(explain(exc, body, kind, "body", _CLIENT)) from None


def refuse(relative: str) -> Invalid:
    """The error a Struct's `__post_init__` raises for a rule msgspec cannot state; the text
    follows the path of the Struct: ".preempt[1] repeats an earlier item" or
    " needs at least 1 field"."""
    return Invalid.following(relative)


class _ClientWording(Wording):
    """The API's words: JSON Schema's type names, as the hand-written validator used."""

    def refused(self, msg: str, spot: Spot) -> str:
        where, value = spot.names, spot.value
        if m := re.match(r"Expected `([^`]*)`, got `([^`]*)`$", msg):
            got = _GOT_WORD.get(m.group(2), m.group(2))
            return f"{where} must be {_types(m.group(1))}, got {got}"
        if m := re.match(r"Expected `\w+` (>=|<=|>|<) (\S+)$", msg):
            word = {">=": "at least", "<=": "at most", ">": "more than", "<": "less than"}
            return f"{where} must be {word[m.group(1)]} {_number(m.group(2))}, got {value}"
        if m := re.match(r"Expected `(str|array|object)` of length (>=|<=) (\d+)$", msg):
            return where + _length(m.group(1), m.group(2) == "<=", int(m.group(3)))
        if m := re.match(r"Expected `str` matching regex '(.*)'$", msg, re.S):
            return f"{where} {value!r} does not match {m.group(1)}"
        if msg.startswith("Invalid enum value"):
            return f"{where} must be one of {', '.join(map(str, _choices(spot.tp)))}"
        if msg == "Integer value out of range":
            return f"{where} is out of range, got {value}"
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


_CLIENT = _ClientWording()


def _choices(tp: Any) -> list[Any]:
    for member in members(tp):
        if typing.get_origin(member) is typing.Literal:
            return list(typing.get_args(member))
    return []
