"""Request bodies decoded into msgspec Structs: errors name the field path and the value,
in the words the hand-written JSON Schema validator used."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Literal

import pytest
from msgspec import Meta, Struct, field

from xce.api.http import parse_json_text
from xce.core.errors import InvalidRequest
from xce.protocol.bodies import SubmitBody
from xce.protocol.decoding import convert, decode, refuse


class Inner(Struct, forbid_unknown_fields=True):
    id: int


class Sample(Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=2, max_length=8, pattern=r"^[a-z]+$")]
    slots: Annotated[int, Meta(ge=1, le=64)] = 1
    ratio: Annotated[float, Meta(ge=0, le=1)] = 0.0
    flag: bool = False
    mode: Literal["requeue", "exit"] = "exit"
    limit: int | None = None
    tags: Annotated[list[Annotated[str, Meta(max_length=4)]], Meta(max_length=3)] = field(
        default_factory=list
    )
    matrix: list[list[Annotated[int, Meta(ge=0)]]] = field(default_factory=list)
    env: Annotated[dict[str, str], Meta(max_length=2)] = field(default_factory=dict)
    keys: dict[Annotated[str, Meta(max_length=3)], int] = field(default_factory=dict)
    share: dict[str, Annotated[float, Meta(gt=0)]] = field(default_factory=dict)
    inner: Inner | None = None
    unique: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.unique)) != len(self.unique):
            raise refuse(".unique repeats an item")


def load(value: Any) -> Sample:
    return decode(json.dumps(value).encode(), Sample, parse_json_text)


def error(value: Any) -> str:
    with pytest.raises(InvalidRequest) as info:
        load(value)
    message = info.value.message
    # an already parsed body (the guard's) gets the same words
    with pytest.raises(InvalidRequest) as again:
        convert(parse_json_text(json.dumps(value)), Sample)
    assert again.value.message == message
    return message


def test_a_valid_body_passes() -> None:
    body = load(
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
        }
    )
    assert body.inner == Inner(3) and body.matrix == [[0, 1], []]
    assert load({"name": "ab", "ratio": 1, "limit": 7}).ratio == 1  # an integer is a number


def test_integral_numbers_are_integers() -> None:
    body = load({"name": "abc", "slots": 2.0})
    assert body.slots == 2 and isinstance(body.slots, int)
    assert error({"name": "abc", "slots": 2.5}) == "body.slots must be integer, got float"


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


def test_integers_are_not_booleans() -> None:
    assert error({"name": "abc", "flag": 1}) == "body.flag must be boolean, got int"


def test_optional_fields_name_both_types() -> None:
    assert error({"name": "abc", "limit": "3"}) == "body.limit must be integer or null, got str"


def test_required_field() -> None:
    assert error({}) == "body.name is required"
    assert error({"name": "abc", "inner": {}}) == "body.inner.id is required"


def test_unknown_fields_are_refused() -> None:
    assert error({"name": "abc", "nmae": "x"}) == "body.nmae is not a known field"
    assert error({"name": "abc", "inner": {"id": 1, "x": 2}}) == "body.inner.x is not a known field"


def test_mapping_values_and_keys_are_named() -> None:
    assert error({"name": "abc", "env": {"A": "", "B": 1}}) == "body.env.B must be string, got int"
    assert error({"name": "abc", "env": {"A": "", "B": "", "C": ""}}) == (
        "body.env has more than 2 entries"
    )
    assert error({"name": "abc", "keys": {"ab": 1, "abcd": 2}}) == (
        "body.keys key 'abcd' is longer than 3 characters"
    )
    assert error({"name": "abc", "share": {"a": 1, "b": 0}}) == (
        "body.share.b must be more than 0, got 0"
    )


def test_minimum_and_maximum() -> None:
    assert error({"name": "abc", "slots": 0}) == "body.slots must be at least 1, got 0"
    assert error({"name": "abc", "slots": 65}) == "body.slots must be at most 64, got 65"
    assert error({"name": "abc", "ratio": -0.5}) == "body.ratio must be at least 0, got -0.5"
    assert error({"name": "abc", "ratio": 1.5}) == "body.ratio must be at most 1, got 1.5"
    assert "body.slots" in error({"name": "abc", "slots": 2**70})


def test_string_lengths_pattern_and_enum() -> None:
    assert error({"name": "abcdefghi"}) == "body.name is longer than 8 characters"
    assert error({"name": "a"}) == "body.name is shorter than 2 characters"
    assert error({"name": "ab1"}) == "body.name 'ab1' does not match ^[a-z]+$"
    assert error({"name": "abc", "mode": "retry"}) == "body.mode must be one of requeue, exit"


def test_arrays_name_every_index() -> None:
    assert error({"name": "abc", "tags": ["a", 2]}) == "body.tags[1] must be string, got int"
    assert error({"name": "abc", "tags": ["a", "toolong"]}) == (
        "body.tags[1] is longer than 4 characters"
    )
    assert error({"name": "abc", "tags": ["a"] * 4}) == "body.tags has more than 3 items"
    assert error({"name": "abc", "tags": "a"}) == "body.tags must be array, got str"
    assert error({"name": "abc", "matrix": [[0], [1, -1]]}) == (
        "body.matrix[1][1] must be at least 0, got -1"
    )
    assert error({"name": "abc", "matrix": [[0], 3]}) == "body.matrix[1] must be array, got int"


def test_a_structs_own_check_is_named() -> None:
    assert error({"name": "abc", "unique": ["a", "a"]}) == "body.unique repeats an item"


def test_bad_json_keeps_the_readers_words() -> None:
    for raw, words in (
        (b'{"name": NaN}', "not a number JSON allows"),
        (b'{"name": "\\ud800"}', "not valid Unicode"),
        (b"[" * 70 + b"]" * 70, "nested more than 64 levels"),
        (b"{", "not valid JSON"),
    ):
        with pytest.raises(InvalidRequest, match=words):
            decode(raw, Sample, parse_json_text)


def test_the_submit_body() -> None:
    body = decode(
        b'{"command": "x", "stdout": "o", "outputs": ["a/*"]}', SubmitBody, parse_json_text
    )
    assert body.stdout_file == "o" and body.outputs == ("a/*",)
    for value, words in (
        ({"command": "x", "slots": True}, r"^body\.slots must be integer, got bool$"),
        ({"command": "x", "slot": 2}, r"^body\.slot is not a known field$"),
        ({"queue": "bad queue"}, r"^body\.queue 'bad queue' does not match"),
        ({"stdout": ""}, r"^body\.stdout is shorter than 1 characters$"),
        ({"gres": {"gpu": -1}}, r"^body\.gres\.gpu must be at least 0, got -1$"),
    ):
        with pytest.raises(InvalidRequest, match=words):
            decode(json.dumps(value).encode(), SubmitBody, parse_json_text)


def test_the_callers_fields_cannot_come_from_the_wire() -> None:
    """SubmitRequest adds who is calling to the body; a client cannot send those."""
    for key in ("privileged", "uploads_of", "may_view_owner", "stdout_file"):
        with pytest.raises(InvalidRequest, match=rf"^body\.{key} is not a known field$"):
            decode(json.dumps({"command": "x", key: True}).encode(), SubmitBody, parse_json_text)


def test_the_cli_sends_the_body_the_api_decodes(tmp_path: Any) -> None:
    import msgspec

    from xce.cli import submitting
    from xce.cli.jobs import _submit_body

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 90\n#SBATCH -o out.%j\n#BSUB -n 2\ntrue\n")
    draft, _ = submitting.build(None, script, [], dict(submitting.DEFAULTS), False, set())
    sent = _submit_body(draft, "fpga:1", "matlab:2", 5)
    wire = json.dumps(sent).encode()  # as the command line's client encodes it
    body = decode(wire, SubmitBody, parse_json_text)
    assert (body.walltime_s, body.stdout_file, body.slots, body.priority) == (5400, "out.%j", 2, 5)
    assert body.gres == {"fpga": 1} and body.licenses == {"matlab": 2}
    assert b'"stdout": "out.%j"' in wire and b"walltime" not in wire.replace(b"walltime_s", b"")
    # what is sent is what the controller reads: nothing null, nothing dropped
    assert msgspec.to_builtins(body).items() <= sent.items()
    assert None not in sent.values()


def test_a_submit_body_without_options_is_the_command_alone() -> None:
    import msgspec

    from xce.cli import submitting
    from xce.cli.jobs import _submit_body

    draft, _ = submitting.build(["true"], None, [], dict(submitting.DEFAULTS), False, set())
    sent = _submit_body(draft, None, None, None)
    body = decode(json.dumps(sent).encode(), SubmitBody, parse_json_text)
    assert body.command is not None and "true" in body.command
    assert body.submit_dir == os.getcwd()
    assert msgspec.to_builtins(body).items() <= sent.items()
    assert not {"outputs", "hold", "queue", "name"} & set(sent)  # unset: not sent
