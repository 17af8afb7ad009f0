"""The JSON-Schema subset that validates request bodies: errors name the field path."""

from __future__ import annotations

from typing import Any

import pytest

from xce.api.schema import validate
from xce.api.schemas import QUEUE_CREATE, SUBMIT
from xce.core.errors import InvalidRequest

BODY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 8, "minLength": 2, "pattern": r"^[a-z]+$"},
        "slots": {"type": "integer", "minimum": 1, "maximum": 64},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["requeue", "exit"]},
        "limit": {"type": ["integer", "null"]},
        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 4}},
        "matrix": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        },
        "env": {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string"}},
        "inner": {
            "type": "object",
            "required": ["id"],
            "additionalProperties": False,
            "properties": {"id": {"type": "integer"}},
        },
    },
}


def error(value: Any, schema: dict[str, Any] = BODY) -> str:
    with pytest.raises(InvalidRequest) as info:
        validate(value, schema)
    return info.value.message


def test_a_valid_body_passes() -> None:
    validate(
        {
            "name": "abc",
            "slots": 64,
            "ratio": 0.5,
            "flag": False,
            "mode": "exit",
            "limit": None,
            "tags": ["a", "bcde"],
            "matrix": [[0, 1], []],
            "env": {"A": "1"},
            "inner": {"id": 3},
        },
        BODY,
    )
    validate({"name": "ab", "ratio": 1, "limit": 7}, BODY)  # an integer is a number


def test_type_error_names_the_field_path() -> None:
    assert error({"name": "abc", "slots": "2"}) == "body.slots must be integer, got str"
    assert error({"name": 5}) == "body.name must be string, got int"
    assert error({"name": "abc", "inner": {"id": "x"}}) == "body.inner.id must be integer, got str"
    assert error([1]) == "body must be object, got list"
    assert error(None) == "body must be object, got null"


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_integers_or_numbers(value: bool) -> None:
    assert error({"name": "abc", "slots": value}) == "body.slots must be integer, got bool"
    assert error({"name": "abc", "ratio": value}) == "body.ratio must be number, got bool"


def test_floats_are_not_integers() -> None:
    assert error({"name": "abc", "slots": 2.0}) == "body.slots must be integer, got float"


def test_integers_are_not_booleans() -> None:
    assert error({"name": "abc", "flag": 1}) == "body.flag must be boolean, got int"


def test_type_lists_accept_any_listed_type() -> None:
    validate({"name": "abc", "limit": None}, BODY)
    validate({"name": "abc", "limit": 3}, BODY)
    assert error({"name": "abc", "limit": "3"}) == "body.limit must be integer or null, got str"


def test_required_field() -> None:
    assert error({}) == "body.name is required"
    assert error({"name": "abc", "inner": {}}) == "body.inner.id is required"


def test_unknown_fields_are_refused() -> None:
    assert error({"name": "abc", "nmae": "x"}) == "body.nmae is not a known field"
    assert error({"name": "abc", "inner": {"id": 1, "x": 2}}) == "body.inner.x is not a known field"


def test_additional_properties_schema_validates_values() -> None:
    assert error({"name": "abc", "env": {"A": 1}}) == "body.env.A must be string, got int"
    assert error({"name": "abc", "env": {"A": "", "B": "", "C": ""}}) == (
        "body.env has more than 2 entries"
    )


def test_additional_properties_default_allows_anything() -> None:
    validate({"x": 1, "y": [None]}, {"type": "object", "properties": {}})


def test_minimum_and_maximum() -> None:
    validate({"name": "abc", "slots": 1}, BODY)
    assert error({"name": "abc", "slots": 0}) == "body.slots must be at least 1, got 0"
    assert error({"name": "abc", "slots": 65}) == "body.slots must be at most 64, got 65"
    assert error({"name": "abc", "ratio": -0.5}) == "body.ratio must be at least 0, got -0.5"
    assert error({"name": "abc", "ratio": 1.5}) == "body.ratio must be at most 1, got 1.5"


def test_string_lengths() -> None:
    validate({"name": "abcdefgh"}, BODY)
    assert error({"name": "abcdefghi"}) == "body.name is longer than 8 characters"
    assert error({"name": "a"}) == "body.name is shorter than 2 characters"


def test_pattern() -> None:
    assert error({"name": "ab1"}) == "body.name 'ab1' does not match ^[a-z]+$"


def test_enum() -> None:
    assert error({"name": "abc", "mode": "retry"}) == "body.mode must be one of requeue, exit"


def test_arrays_items_and_max_items() -> None:
    assert error({"name": "abc", "tags": ["a", 2]}) == "body.tags[1] must be string, got int"
    assert error({"name": "abc", "tags": ["a", "toolong"]}) == (
        "body.tags[1] is longer than 4 characters"
    )
    assert error({"name": "abc", "tags": ["a"] * 4}) == "body.tags has more than 3 items"
    assert error({"name": "abc", "tags": "a"}) == "body.tags must be array, got str"


def test_nested_arrays_name_every_index() -> None:
    assert error({"name": "abc", "matrix": [[0], [1, -1]]}) == (
        "body.matrix[1][1] must be at least 0, got -1"
    )
    assert error({"name": "abc", "matrix": [[0], 3]}) == "body.matrix[1] must be array, got int"


def test_custom_root_path() -> None:
    with pytest.raises(InvalidRequest, match=r"^query\.x must be integer"):
        validate({"x": "1"}, {"type": "object", "properties": {"x": {"type": "integer"}}}, "query")


def test_real_submit_schema() -> None:
    validate({"command": "echo hi", "slots": 2, "outputs": ["a/*"], "env": {"A": "b"}}, SUBMIT)
    with pytest.raises(InvalidRequest, match=r"^body\.slots must be integer, got bool$"):
        validate({"command": "x", "slots": True}, SUBMIT)
    with pytest.raises(InvalidRequest, match=r"^body\.slot is not a known field$"):
        validate({"command": "x", "slot": 2}, SUBMIT)
    with pytest.raises(InvalidRequest, match=r"^body\.queue 'bad queue' does not match"):
        validate({"queue": "bad queue"}, SUBMIT)


def test_real_queue_schema() -> None:
    validate({"name": "short", "on_host_failure": "exit", "hosts": ["h1"]}, QUEUE_CREATE)
    with pytest.raises(InvalidRequest, match=r"^body\.name is required$"):
        validate({}, QUEUE_CREATE)
    with pytest.raises(InvalidRequest, match=r"^body\.on_host_failure must be one of"):
        validate({"name": "q", "on_host_failure": "retry"}, QUEUE_CREATE)
    with pytest.raises(InvalidRequest, match=r"^body\.hosts\[0\] "):
        validate({"name": "q", "hosts": ["-x"]}, QUEUE_CREATE)


def test_min_items_and_unique_items_are_checked() -> None:
    """Both keywords are declared by request schemas (reservation hosts and flags, queue
    preempt); the validator once ignored them."""
    schema = {"type": "array", "minItems": 1, "uniqueItems": True}
    validate(["a", "b"], schema)
    validate([{"a": 1}, {"a": 2}], schema)
    for value, words in (
        ([], "at least 1 item"),
        (["a", "a"], "body[1] repeats"),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], "body[1] repeats"),
    ):
        try:
            validate(value, schema)
        except InvalidRequest as exc:
            assert words in exc.message, exc.message
        else:
            raise AssertionError(f"{value!r} was accepted")
