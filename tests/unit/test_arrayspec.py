"""Array index specs (`1-1000:2%10`) and the range-backed IndexSet."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xce.core.arrayspec import MAX_INDEX, IndexSet, parse_array_spec
from xce.core.errors import InvalidRequest


def test_stepped_range_with_limit() -> None:
    spec = parse_array_spec("1-1000:2%10")
    assert len(spec.indices) == 500
    assert spec.max_concurrent == 10
    assert spec.indices.first() == [1]
    assert list(spec.indices)[-1] == 999
    assert 999 in spec.indices
    assert 1000 not in spec.indices
    assert 2 not in spec.indices
    assert spec.indices.describe() == "1-999:2"


def test_list_of_single_indices() -> None:
    spec = parse_array_spec("1,3,5")
    assert list(spec.indices) == [1, 3, 5]
    assert spec.max_concurrent is None
    assert spec.indices.describe() == "1,3,5"


def test_range_from_zero_with_limit() -> None:
    spec = parse_array_spec("0-15%4")
    assert list(spec.indices) == list(range(16))
    assert spec.max_concurrent == 4
    assert spec.indices.describe() == "0-15"


def test_single_index() -> None:
    spec = parse_array_spec("7")
    assert list(spec.indices) == [7]
    assert len(spec.indices) == 1
    assert spec.indices.describe() == "7"


def test_items_are_sorted_and_whitespace_is_ignored() -> None:
    spec = parse_array_spec(" 20-22 , 3 ,10-14:2 ")
    assert list(spec.indices) == [3, 10, 12, 14, 20, 21, 22]
    assert spec.indices.describe() == "3,10-14:2,20-22"


def test_step_that_does_not_reach_the_end() -> None:
    spec = parse_array_spec("1-10:4")
    assert list(spec.indices) == [1, 5, 9]
    assert spec.indices.describe() == "1-9:4"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("5-1", "ends before it starts"),
        ("1-10:0", "step in '1-10:0' must be at least 1"),
        ("a-b", "cannot read 'a-b'"),
        ("1-10%0", "limit after % must be a positive integer"),
        ("1-10%", "limit after % must be a positive integer"),
        ("1-10%x", "limit after % must be a positive integer"),
        ("1-10%-2", "limit after % must be a positive integer"),
        ("%5", "cannot read ''"),
        ("1,,2", "cannot read ''"),
        ("-3", "cannot read '-3'"),
        ("1-10,5-20", "overlap near index 5"),
        ("3,3", "overlap near index 3"),
        ("1:2", "cannot read '1:2'"),
        (f"0-{MAX_INDEX + 1}", f"index {MAX_INDEX + 1} is above {MAX_INDEX}"),
    ],
)
def test_bad_specs_are_invalid_requests_that_say_why(text: str, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_array_spec(text)
    assert fragment in info.value.message


def test_non_string_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        parse_array_spec(None)  # type: ignore[arg-type]


def test_max_size_is_enforced() -> None:
    assert len(parse_array_spec("1-100", max_size=100).indices) == 100
    with pytest.raises(InvalidRequest, match="101 tasks is more than the limit of 100"):
        parse_array_spec("0-100", max_size=100)
    with pytest.raises(InvalidRequest, match="more than the limit of 1000000"):
        parse_array_spec("0-1000000")


def test_a_million_tasks_is_a_single_range_and_cheap() -> None:
    tracemalloc.start()
    spec = parse_array_spec("1-1000000%50")
    s = spec.indices
    assert len(s.ranges) == 1
    assert len(s) == 1_000_000
    assert 1_000_000 in s and 0 not in s
    assert s.first(3) == [1, 2, 3]
    smaller = s.without(500_000)
    assert len(smaller.ranges) == 2
    assert len(smaller) == 999_999
    assert smaller.describe() == "1-499999,500001-1000000"
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, "a million tasks were enumerated"


def test_huge_spec_over_the_limit_is_refused_without_enumerating() -> None:
    tracemalloc.start()
    with pytest.raises(InvalidRequest, match="2147483648 tasks"):
        parse_array_spec(f"0-{MAX_INDEX}")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, "the tasks were enumerated"


# --- IndexSet ----------------------------------------------------------------------------


def test_without_splits_a_stepped_range() -> None:
    s = IndexSet((range(1, 11, 2),))  # 1 3 5 7 9
    out = s.without(5)
    assert out.ranges == (range(1, 5, 2), range(7, 11, 2))
    assert list(out) == [1, 3, 7, 9]
    assert out.describe() == "1-3:2,7-9:2"


def test_without_at_the_edges_does_not_leave_empty_ranges() -> None:
    s = IndexSet((range(0, 3), range(10, 11)))
    assert s.without(0).ranges == (range(1, 3), range(10, 11))
    assert s.without(2).ranges == (range(0, 2), range(10, 11))
    assert s.without(10).ranges == (range(0, 3),)
    empty = IndexSet((range(4, 5),)).without(4)
    assert empty.ranges == ()
    assert not empty
    assert len(empty) == 0


def test_without_an_absent_index_is_unchanged() -> None:
    s = IndexSet((range(1, 11, 2),))
    assert s.without(4) == s
    assert s.without(11) == s
    assert s.without(-1) == s


def test_without_does_not_change_the_original() -> None:
    s = IndexSet((range(0, 5),))
    s.without(2)
    assert list(s) == [0, 1, 2, 3, 4]


def test_first_returns_the_lowest_across_ranges() -> None:
    s = IndexSet((range(1, 3), range(10, 20)))
    assert s.first() == [1]
    assert s.first(4) == [1, 2, 10, 11]
    assert s.first(100) == [1, 2, *range(10, 20)]
    assert s.first(0) == []
    assert IndexSet().first(3) == []


def test_contains_and_bool() -> None:
    s = IndexSet((range(1, 3), range(10, 20, 5)))
    assert [i for i in range(25) if i in s] == [1, 2, 10, 15]
    assert "1" not in s
    assert s
    assert not IndexSet()


def test_describe_of_empty_set() -> None:
    assert IndexSet().describe() == ""


@settings(max_examples=150, deadline=None)
@given(st.sets(st.integers(0, 60), min_size=1, max_size=30), st.data())
def test_without_matches_set_difference(indices: set[int], data: st.DataObject) -> None:
    spec = parse_array_spec(",".join(map(str, sorted(indices))))
    removed = data.draw(st.lists(st.integers(-1, 61), max_size=10))
    s = spec.indices
    for i in removed:
        s = s.without(i)
    expected = sorted(indices - set(removed))
    assert list(s) == expected
    assert len(s) == len(expected)
    assert bool(s) == bool(expected)
    # the compact form parses back to the same indices
    if expected:
        assert list(parse_array_spec(s.describe()).indices) == expected


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 500), st.integers(0, 500), st.integers(1, 7))
def test_parsed_range_matches_python_range(start: int, length: int, step: int) -> None:
    stop = start + length
    s = parse_array_spec(f"{start}-{stop}:{step}").indices
    assert list(s) == list(range(start, stop + 1, step))
    assert list(parse_array_spec(s.describe()).indices) == list(s)


# --- BUG in xce/core/arrayspec.py: fails until fixed --------------------------------------


def test_bug_non_ascii_digit_limit_is_invalid_request_not_value_error() -> None:
    """BUG: `str.isdigit()` accepts '²', which `int()` rejects, so `1-10%²` raises a bare
    ValueError instead of the promised InvalidRequest (arrayspec.py, the `%` limit check)."""
    with pytest.raises(InvalidRequest, match="limit after %"):
        parse_array_spec("1-10%²")
