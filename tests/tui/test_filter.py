"""The jobs filter language: parsing, matching and errors that name the term."""

from __future__ import annotations

import pytest

from xce.console.filter import FilterError, parse_filter

ROW = {
    "id": "17[3]",
    "array_id": "17",
    "user": "alice",
    "state": "RUN",
    "queue": "long",
    "host": "w1",
    "name": "simulate-big",
}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", True),
        ("state=RUN user=alice queue:long", True),
        ("state=run", True),
        ("state=PEND,RUN", True),
        ("state=PEND", False),
        ("user!=alice", False),
        ("user!=bob host=w1", True),
        ("name~SIM", True),
        ("name~xyz,big", True),
        ("array=17", True),
        ("array=18", False),
        ("simulate", True),
        ("17[3]", True),
        ('name="simulate-big" queue=long', True),
        ("queue=long queue=short", False),
    ],
)
def test_terms_match_as_documented(text: str, expected: bool) -> None:
    assert parse_filter(text).matches(ROW) is expected


def test_missing_values_match_nothing_but_negations() -> None:
    row = {**ROW, "host": None}
    assert not parse_filter("host=w1").matches(row)
    assert parse_filter("host!=w1").matches(row)


@pytest.mark.parametrize(
    "text, message",
    [
        ("colour=red", "unknown field 'colour'"),
        ("state=RUNNING", "unknown state 'RUNNING'"),
        ("user=", "has no value"),
        ('name="open', "cannot read the filter"),
    ],
)
def test_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        parse_filter(text)


def test_the_text_is_kept_for_display() -> None:
    assert parse_filter("  state=RUN ").text == "state=RUN"
    assert not parse_filter("")
