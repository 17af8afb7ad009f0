"""Evaluating select expressions, order keys and host attribute maps."""

from __future__ import annotations

import pytest

from xce.sched.expr import as_number, host_attributes, matches, order_key, parse_requirement
from xce.sched.snapshot import HostView

LINUX = {
    "type": "LINUX",
    "model": "EPYC",
    "mem": 8000,
    "slots": 4,
    "ncpus": "16",
    "rack": "r1",
    "ut": 0.25,
}


def ok(text: str, attrs: dict) -> bool:
    return matches(parse_requirement(text).select, attrs)


def test_no_select_matches_everything() -> None:
    assert matches(None, {})
    assert matches(parse_requirement("order[ut]").select, {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mem>4000", True),
        ("mem>8000", False),
        ("mem>=8000", True),
        ("mem=8000", True),
        ("mem==8000.0", True),
        ("mem!=8000", False),
        ("mem<8000.5", True),
        ("ut<=0.25", True),
        ("type==LINUX", True),
        ("type=='LINUX'", True),
        ('type=="LINUX"', True),
        ("type==linux", False),  # case-sensitive
        ("type!=AIX", True),
        ("ncpus>8", True),  # an attribute string that reads as a number is a number
        ("ncpus>=16.0", True),
        ("ncpus>'8'", False),  # a quoted literal is a string: "16" < "8"
        ("model>EP", True),  # string ordering
        ("mem>slots", True),  # two attributes
        ("slots<mem", True),
        ("4000<mem", True),
        ("-1<slots", True),
        ("type==LINUX && mem>4000", True),
        ("type==AIX || mem>4000", True),
        ("type==AIX || mem>9000", False),
        ("!(type==AIX)", True),
        ("!type==LINUX", False),
        ("(type==AIX || type==LINUX) && !(mem<1000)", True),
        ("defined(rack)", True),
        ("defined(gpu)", False),
        ("!defined(gpu) && rack==r1", True),
        ("a || b && c", False),
    ],
)
def test_select(text: str, expected: bool) -> None:
    assert ok(text, LINUX) is expected


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_undefined_attribute_makes_any_comparison_false(op: str) -> None:
    assert ok(f"gpu{op}1", LINUX) is False
    assert ok(f"1{op}gpu", LINUX) is False
    assert ok(f"gpu{op}LINUX", LINUX) is False
    assert ok(f"!(gpu{op}1)", LINUX) is True


def test_undefined_bare_word_on_the_right_is_a_string() -> None:
    assert ok("type==LINUX", LINUX)
    # ...but a defined attribute of that name is used
    assert ok("type==LINUX", {**LINUX, "LINUX": "other"}) is False


def test_precedence_is_evaluated_as_parsed() -> None:
    # a || (b && c): true with a alone
    assert ok("a || b && c", {"a": 1})
    assert not ok("(a || b) && c", {"a": 1})


def test_flags() -> None:
    assert ok("gpu", {"gpu": 1})
    assert ok("gpu", {"gpu": "yes"})
    assert not ok("gpu", {"gpu": 0})
    assert not ok("gpu", {"gpu": "0"})
    assert not ok("gpu", {"gpu": "False"})
    assert not ok("gpu", {"gpu": ""})
    assert not ok("gpu", {})


def test_mixed_number_and_string_compare_as_text() -> None:
    assert ok("v==abc", {"v": "abc"})
    assert ok("v>1", {"v": "abc"})  # as text: "abc" > "1"
    assert not ok("v<1", {"v": "abc"})
    assert ok("v=='16'", {"v": 16})  # text of 16 is "16"
    assert ok("v=='16'", {"v": 16.0})


def test_what_counts_as_a_number() -> None:
    assert [as_number(v) for v in ("16", " 2.5 ", "-1e3", ".5", 7, 1.5)] == [
        16.0,
        2.5,
        -1000.0,
        0.5,
        7.0,
        1.5,
    ]
    assert [as_number(v) for v in ("nan", "inf", "0x10", "1,000", "", True, float("nan"))] == [
        None
    ] * 7
    assert ok("v==nan", {"v": "nan"})
    assert ok("v>1", {"v": "1e3"})


# -- order -----------------------------------------------------------------------------------


HOSTS = {
    "a": {"ut": 0.9, "mem": 1000, "slots": 2, "type": "X"},
    "b": {"ut": 0.1, "mem": 4000, "slots": 2, "type": "Y"},
    "c": {"ut": 0.5, "mem": 4000, "slots": 8},
    "d": {"mem": 9000, "slots": 1, "type": "Z"},
}


def ordered(text: str) -> list[str]:
    req = parse_requirement(text)
    return sorted(HOSTS, key=lambda h: order_key(req, HOSTS[h]))


def test_order_default_is_ascending() -> None:
    assert ordered("order[ut]") == ["b", "c", "a", "d"]  # d has no ut: last


def test_order_minus_is_descending() -> None:
    assert ordered("order[-mem]") == ["d", "b", "c", "a"]
    assert ordered("order[-ut]") == ["a", "c", "b", "d"]  # missing stays last


def test_leftmost_key_dominates() -> None:
    assert ordered("order[-mem:ut]") == ["d", "b", "c", "a"]
    assert ordered("order[-mem:-ut]") == ["d", "c", "b", "a"]
    assert ordered("order[-slots:mem]") == ["c", "a", "b", "d"]


def test_order_by_strings() -> None:
    assert ordered("order[type]") == ["a", "b", "d", "c"]
    assert ordered("order[-type]") == ["d", "b", "a", "c"]


def test_order_key_mixed_kinds_do_not_crash() -> None:
    req = parse_requirement("order[v]")
    keys = [order_key(req, {"v": v}) for v in (3, "x", "2", 1.5)] + [order_key(req, {})]
    assert sorted(keys) == [
        order_key(req, {"v": 1.5}),
        order_key(req, {"v": "2"}),
        order_key(req, {"v": 3}),
        order_key(req, {"v": "x"}),
        order_key(req, {}),
    ]


def test_no_order_is_an_empty_key() -> None:
    assert order_key(parse_requirement("mem>1"), HOSTS["a"]) == ()


# -- host attributes -------------------------------------------------------------------------


def test_host_attributes_from_a_host_view() -> None:
    view = HostView("n1", 16, 64000, 12, 30000, (("type", "LINUX"), ("rack", "r7")), True)
    attrs = host_attributes(view)
    assert attrs == {
        "slots": 12,
        "maxslots": 16,
        "mem": 30000,
        "maxmem": 64000,
        "type": "LINUX",
        "rack": "r7",
        "hname": "n1",
    }
    req = parse_requirement("select[type==LINUX && mem>=30000 && maxslots>12] order[-mem]")
    assert matches(req.select, attrs)


def test_builtin_names_win_over_attributes() -> None:
    view = HostView("n1", 16, 64000, 12, 30000, (("mem", "1"),), True)
    assert host_attributes(view)["mem"] == 30000


def test_ut_is_included_when_given() -> None:
    class WithUt:
        name, slots, memory_mb, free_slots, free_memory_mb = "n", 4, 100, 4, 100
        attributes = ()
        ut = 0.3

    assert host_attributes(WithUt())["ut"] == 0.3
    assert "ut" not in host_attributes(HostView("n", 1, 1, 1, 1, (), True))
