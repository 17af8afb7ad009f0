"""Property tests: any text either parses or raises ExprError, quickly; printing round-trips."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xce.sched.expr import ExprError, matches, order_key, parse_requirement
from xce.sched.expr.parser import parse

ALPHABET = "selctordrusagpnmhi[](){}!|&=<>-:,.'\" \t0123456789eE_xyzABC$#\\"
PIECES = [
    "select[",
    "order[",
    "rusage[",
    "span[",
    "same[",
    "]",
    "(",
    ")",
    "!",
    "&&",
    "||",
    "==",
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "-",
    ":",
    ",",
    "defined(",
    "mem",
    "ut",
    "type",
    "LINUX",
    "4000",
    "0.5",
    "1e3",
    "'x'",
    '"y z"',
    "hosts=1",
    "ptile=",
    " ",
]

texts = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=ALPHABET, max_size=200),
    st.lists(st.sampled_from(PIECES), max_size=60).map("".join),
)
ATTRS = {"mem": 4000, "ut": "0.5", "type": "LINUX", "x": "x"}


def _check(text: str) -> None:
    try:
        req = parse(text)
    except ExprError as e:
        assert " at column " in str(e)
        assert 1 <= e.column <= len(text) + 1
        return
    # whatever parses can be evaluated and ordered without raising
    matches(req.select, ATTRS)
    matches(req.select, {})
    order_key(req, ATTRS)
    if req.select is not None:
        assert parse(f"select[{req.select}]").select == req.select


@settings(max_examples=1500, deadline=None)
@given(texts)
def test_random_text_parses_or_raises_expr_error(text: str) -> None:
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.sampled_from(["(", "!", "(!", "!(", "((a||"]))
def test_deep_nesting_raises_expr_error_not_recursion_error(n: int, piece: str) -> None:
    _check(piece * n)
    _check(piece * n + "a" + ")" * n)


@pytest.mark.timeout(60)  # a parser gone quadratic or worse hangs here
def test_long_inputs_parse_or_fail_cleanly() -> None:
    for text in [
        "a==1 && " * 20_000 + "b",
        "a||" * 20_000 + "b",
        "(" * 100_000,
        "'" + "x" * 100_000,
        "9" * 100_000,
        "rusage[" + "m=1:" * 10_000 + "m=1]",
    ]:
        with contextlib.suppress(ExprError):
            parse(text)


def test_cached_entry_point_raises_expr_error_too() -> None:
    for text in ["select[", "(" * 500, "\x00"]:
        try:
            parse_requirement(text)
        except ExprError:
            continue
        raise AssertionError(text)
