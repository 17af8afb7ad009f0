"""`check_texts`: the one-look fast path for plain submits refuses exactly what the
field-by-field walk refuses, naming the same field."""

from __future__ import annotations

from typing import Any

import pytest

from xce.controller.submit_checks import check_texts
from xce.core.errors import InvalidRequest
from xce.protocol.bodies import SubmitBody


def _req(**fields: Any) -> SubmitBody:
    return SubmitBody(**({"command": "true", "user": "alice"} | fields))


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"name": "café ☕", "env": {"LANG": "en_GB.UTF-8", "GREETING": "grüß"}},
        {"outputs": ("résultat.txt",), "inputs": {"données.csv": "u1"}},
    ],
)
def test_valid_text_passes(fields: dict[str, Any]) -> None:
    check_texts(_req(**fields))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "a\x00b"}, "name contains a NUL byte"),
        ({"command": "echo \udcff"}, "command is not valid Unicode"),
        ({"reservation": "r\x00"}, "reservation contains a NUL byte"),
        ({"env": {"A\x00": "1"}}, "an env variable name contains a NUL"),
        ({"env": {"A": "é\x00"}}, "env variable A contains a NUL"),
        ({"inputs": {"in.txt": "\ud800"}}, "the upload id of input in.txt is not valid"),
        ({"outputs": ("ok", "x\x00")}, "an output pattern contains a NUL"),
        # The first field at fault is named, as the walk always did.
        ({"user": "a\x00", "name": "b\x00"}, "user contains a NUL"),
    ],
)
def test_bad_text_is_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        check_texts(_req(**fields))
