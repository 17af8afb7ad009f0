"""xce/config/check.py: msgspec's errors reworded to name the key, in one place."""

from __future__ import annotations

import tomllib
from typing import Annotated, Any, Literal

import msgspec
import pytest

from xce.config.check import PosFloat, PosInt, PosNumber, Table, convert
from xce.config.loader import parse_config
from xce.core.errors import ConfigError
from xce.core.validation import Invalid, error, hint, required


class Inner(Table, frozen=True):
    size: PosInt = 1
    mode: Literal["a", "b", "c"] = "a"

    def __post_init__(self) -> None:
        if self.size == 7:
            raise Invalid("size 7 is unlucky")
        if self.size == 8:
            raise Invalid("eight is too many", whole=True)


class Outer(Table, frozen=True):
    name: str
    inner: list[Inner] = []
    shares: dict[str, PosNumber] = {}
    hosts: Annotated[tuple[str, ...], error("must be a list of host names")] = ()
    port: Annotated[int, msgspec.Meta(ge=1), hint("must be a port number")] = 1
    rate: PosFloat = 1.0
    tags: dict[str, Annotated[str, error("must be a tag")]] = {}
    inners: dict[str, Inner] = {}


class Login(Table, frozen=True):
    url: Annotated[str, required()]
    user: Annotated[str, hint("may not be empty", min_length=1), required("is needed")]


def message(data: Any, where: str = "") -> str:
    with pytest.raises(ConfigError) as info:
        convert(data, Outer, where)
    return info.value.message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"name": "n", "x": 1}, "unknown key (top level).x (allowed: "),
        (
            {"name": "n", "inner": [{}, {"sise": 1}]},
            "unknown key inner[1].sise (allowed: mode, size)",
        ),
        ({}, "name must be a str, got None"),
        ({"name": 3}, "name must be a str, got 3"),
        ({"name": "n", "rate": True}, "rate must be a int or float, not a boolean"),
        ({"name": "n", "rate": 0}, "rate must be positive, got 0"),
        ({"name": "n", "inner": [{"size": 0}]}, "inner[0].size must be positive, got 0"),
        ({"name": "n", "inner": [{"mode": "d"}]}, "inner[0].mode must be a, b or c, got 'd'"),
        ({"name": "n", "inner": [{"size": 7}]}, "inner[0].size 7 is unlucky"),
        ({"name": "n", "inner": [{"size": 8}]}, "inner[0]: eight is too many"),
        ({"name": "n", "shares": {"a": 1, "b": -2.5}}, "shares.b must be positive, got -2.5"),
        ({"name": "n", "shares": {"a": "x"}}, "shares.a must be a int or float, got 'x'"),
        ({"name": "n", "hosts": ["h", 1]}, "hosts must be a list of host names"),
        ({"name": "n", "hosts": "h"}, "hosts must be a list of host names"),
        ({"name": "n", "port": 0}, "port must be a port number, got 0"),
        ({"name": "n", "tags": {"ok": "x", "bad": 1}}, "tags.bad must be a tag"),
        ({"name": "n", "tags": []}, "tags must be a dict, got []"),
        ({"name": "n", "inners": {"a": {"size": 0}}}, "inners.a.size must be positive, got 0"),
    ],
)
def test_messages_name_the_key(data: dict[str, Any], expected: str) -> None:
    assert message(data).startswith(expected)


def test_where_prefixes_the_keys_of_one_table() -> None:
    assert message({"name": "n", "z": 1}, "auth").startswith("unknown key auth.z (allowed: ")
    assert message({"name": "n", "rate": -1}, "auth") == "auth.rate must be positive, got -1"
    assert message([], "auth") == "auth must be a dict, got []"


def test_good_data_converts_with_types_kept() -> None:
    out = convert({"name": "n", "shares": {"a": 3, "b": 2.5}, "rate": 2}, Outer)
    assert out.shares == {"a": 3, "b": 2.5} and isinstance(out.shares["a"], int)
    assert out.rate == 2.0 and isinstance(out.rate, float)


def test_a_required_key_says_so_when_missing() -> None:
    with pytest.raises(ConfigError, match=r"^auth\.backend\[0\]\.url is required$"):
        convert({"user": "u"}, Login, "auth.backend[0]")
    with pytest.raises(ConfigError, match=r"^user is needed$"):
        convert({"url": "x"}, Login)
    with pytest.raises(ConfigError, match=r"^user may not be empty, got ''$"):
        convert({"url": "x", "user": ""}, Login)
    with pytest.raises(ConfigError, match=r"^url must be a str, got 1$"):
        convert({"url": 1, "user": "u"}, Login)


class Shown(Table, frozen=True):
    users: Annotated[tuple[str, ...], error("must be a list of user names", got=True)] = ()
    groups: dict[str, Annotated[tuple[str, ...], error("must be a list", got=True)]] = {}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"users": "daemon"}, "users must be a list of user names, got 'daemon'"),
        ({"users": ["a", 1]}, "users must be a list of user names, got ['a', 1]"),
        ({"groups": {"g": 5}}, "groups.g must be a list, got 5"),
    ],
)
def test_an_error_with_got_shows_the_keys_value(data: dict[str, Any], expected: str) -> None:
    """The wording these keys had before the tables: the whole value of the key."""
    with pytest.raises(ConfigError) as caught:
        convert(data, Shown)
    assert caught.value.message == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[controller]\njob_users = "daemon"',
            "controller.job_users must be a list of user names, got 'daemon'",
        ),
        ("[auth]\ndefault_roles = 1", "auth.default_roles must be a list of strings, got 1"),
        (
            '[auth.roles]\nr = "job:submit"',
            "auth.roles.r must be a list of strings, got 'job:submit'",
        ),
        (
            "[tls]\nrequire_client_cert = 1",
            'tls.require_client_cert must be "none", "workers", "all" or a boolean, got 1',
        ),
        (
            '[[license]]\nname = "m"\ncount = true',
            "license[0].count must be a whole number >= 0, got True",
        ),
    ],
)
def test_the_config_file_keeps_its_old_wording(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads(text))
    assert caught.value.message == expected
