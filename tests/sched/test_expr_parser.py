"""Parsing LSF-style resource requirement strings: sections, precedence, errors, caching."""

from __future__ import annotations

import pytest

from xce.core.errors import InvalidRequest
from xce.sched.expr import (
    MAX_DEPTH,
    And,
    Compare,
    Defined,
    ExprError,
    Flag,
    Name,
    Not,
    Number,
    Or,
    OrderKey,
    ResourceRequirement,
    Rusage,
    Span,
    String,
    parse_requirement,
    tokenize,
)


def sel(text: str):
    return parse_requirement(text).select


def cmp(left: str, op: str, right: object) -> Compare:
    operand = Number(right) if isinstance(right, int | float) else Name(str(right))
    return Compare(op, Name(left), operand)


# -- tokens ----------------------------------------------------------------------------------


def test_tokens_carry_one_based_columns() -> None:
    toks = tokenize('select[mem>=4000 && type=="X86_64"]')
    assert [(t.text, t.column) for t in toks] == [
        ("select", 1),
        ("[", 7),
        ("mem", 8),
        (">=", 11),
        ("4000", 13),
        ("&&", 18),
        ("type", 21),
        ("==", 25),
        ("X86_64", 27),
        ("]", 35),
        ("", 36),
    ]
    assert toks[4].value == 4000
    assert tokenize("1.5")[0].value == 1.5


# -- select ----------------------------------------------------------------------------------


def test_empty_string_is_no_requirement() -> None:
    assert parse_requirement("") == ResourceRequirement()
    assert parse_requirement("   ") == ResourceRequirement()


def test_bare_expression_is_a_select() -> None:
    assert sel("mem>4000") == cmp("mem", ">", 4000)
    assert parse_requirement("mem>4000") == parse_requirement("select[mem>4000]")


def test_bare_expression_followed_by_sections() -> None:
    req = parse_requirement("mem>4000 rusage[mem=4000]")
    assert req.select == cmp("mem", ">", 4000)
    assert req.rusage == (Rusage("mem", 4000),)


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("a==1", "=="),
        ("a=1", "=="),
        ("a!=1", "!="),
        ("a<1", "<"),
        ("a<=1", "<="),
        ("a>1", ">"),
        ("a>=1", ">="),
    ],
)
def test_comparison_operators(text: str, op: str) -> None:
    assert sel(text) == Compare(op, Name("a"), Number(1))


def test_operands() -> None:
    assert sel("type==LINUX") == Compare("==", Name("type"), Name("LINUX"))
    assert sel('model=="Intel EM64T"') == Compare("==", Name("model"), String("Intel EM64T"))
    assert sel("model=='x'") == Compare("==", Name("model"), String("x"))
    assert sel("load<0.5") == Compare("<", Name("load"), Number(0.5))
    assert sel("x>-2") == Compare(">", Name("x"), Number(-2))
    assert sel("x>1e3") == Compare(">", Name("x"), Number(1000.0))
    assert sel("defined(gpu)") == Defined("gpu")
    assert sel("gpu") == Flag("gpu")
    assert sel("defined") == Flag("defined")


def test_or_binds_looser_than_and() -> None:
    assert sel("a || b && c") == Or((Flag("a"), And((Flag("b"), Flag("c")))))
    assert sel("a && b || c") == Or((And((Flag("a"), Flag("b"))), Flag("c")))


def test_chains_are_flattened() -> None:
    assert sel("a || b || c") == Or((Flag("a"), Flag("b"), Flag("c")))
    assert sel("a && b && c") == And((Flag("a"), Flag("b"), Flag("c")))


def test_not_binds_tightest() -> None:
    assert sel("!a && b") == And((Not(Flag("a")), Flag("b")))
    assert sel("!a==1") == Not(cmp("a", "==", 1))
    assert sel("!!a") == Not(Not(Flag("a")))


def test_parentheses_override_precedence() -> None:
    assert sel("(a || b) && c") == And((Or((Flag("a"), Flag("b"))), Flag("c")))
    assert sel("((a))") == Flag("a")


def test_nested_expression() -> None:
    got = sel("select[(type==LINUX || type==AIX) && !(mem<1000 || defined(busy)) && slots>=2]")
    assert got == And(
        (
            Or(
                (
                    Compare("==", Name("type"), Name("LINUX")),
                    Compare("==", Name("type"), Name("AIX")),
                )
            ),
            Not(Or((cmp("mem", "<", 1000), Defined("busy")))),
            cmp("slots", ">=", 2),
        )
    )


def test_str_round_trips() -> None:
    for text in [
        "a || b && c",
        "(a || b) && !c",
        "!(a==1) && defined(x) || y!='q r'",
        "x>-2.5 && (a || (b && c))",
    ]:
        node = sel(text)
        assert sel(str(node)) == node


def test_whitespace_is_ignored() -> None:
    assert parse_requirement(" select [ a  ==  1 ]  order[ ut ] ") == ResourceRequirement(
        select=cmp("a", "==", 1), order=(OrderKey("ut"),)
    )


# -- other sections --------------------------------------------------------------------------


def test_order_keys() -> None:
    assert parse_requirement("order[ut]").order == (OrderKey("ut"),)
    assert parse_requirement("order[-slots:mem]").order == (
        OrderKey("slots", descending=True),
        OrderKey("mem", descending=False),
    )
    assert parse_requirement("order[r15s:-mem:ut]").order == (
        OrderKey("r15s"),
        OrderKey("mem", True),
        OrderKey("ut"),
    )


def test_rusage() -> None:
    assert parse_requirement("rusage[mem=2000:duration=10]").rusage == (
        Rusage("mem", 2000, duration=10),
    )
    assert parse_requirement("rusage[mem=2000,swp=100]").rusage == (
        Rusage("mem", 2000),
        Rusage("swp", 100),
    )
    assert parse_requirement("rusage[mem=20:swp=50:duration=5:decay=1]").rusage == (
        Rusage("mem", 20, 5, 1),
        Rusage("swp", 50, 5, 1),
    )
    assert parse_requirement("rusage[mem=2.5:decay=0.5, lic=1:duration=2]").rusage == (
        Rusage("mem", 2.5, None, 0.5),
        Rusage("lic", 1, 2, None),
    )


def test_span() -> None:
    assert parse_requirement("span[hosts=1]").span == Span(hosts=1)
    assert parse_requirement("span[ptile=4]").span == Span(ptile=4)
    assert parse_requirement("span[block=8]").span == Span(block=8)


def test_same() -> None:
    assert parse_requirement("same[rack]").same == ("rack",)
    assert parse_requirement("same[rack:type]").same == ("rack", "type")


def test_all_sections_in_any_order() -> None:
    text = "same[rack] span[ptile=2] rusage[mem=100] order[-mem:ut] select[type==LINUX && mem>100]"
    assert parse_requirement(text) == ResourceRequirement(
        select=And((Compare("==", Name("type"), Name("LINUX")), cmp("mem", ">", 100))),
        order=(OrderKey("mem", True), OrderKey("ut")),
        rusage=(Rusage("mem", 100),),
        span=Span(ptile=2),
        same=("rack",),
    )


def test_parsed_form_is_cached_and_immutable() -> None:
    s = "select[mem>4000] order[-mem]"
    assert parse_requirement(s) is parse_requirement(s)
    req = parse_requirement(s)
    with pytest.raises(AttributeError):
        req.select = None  # type: ignore[misc]
    assert hash(req) == hash(parse_requirement("select[ mem > 4000 ] order[ -mem ]"))


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("select[mem>4000 && ut<0.5", "unexpected end of expression at column 26"),
        ("select[mem>4000 x", "expected ']' at column 17"),
        ("selec[mem>4000]", "unknown section 'selec' at column 1"),
        ("select[mem>", "unexpected end of expression at column 12"),
        ("order[ut] order[mem]", "duplicate section 'order' at column 11"),
        ("mem>1 select[ut<1]", "duplicate section 'select' at column 7"),
        ("select[mem>>1]", "expected an operand, got '>' at column 12"),
        ("select[(a==1]", "expected ')' at column 13"),
        ("select[a==1 && ]", "expected an operand, got ']' at column 16"),
        ("select[a $ b]", "unexpected character '$' at column 10"),
        ("select[a & b]", "unexpected character '&' at column 10"),
        ("select[type=='LINUX]", "unterminated string at column 14"),
        ("select[mem>4G]", "invalid number '4G' at column 12"),
        ("select[mem>1e999]", "number out of range '1e999' at column 12"),
        ("select[1]", "expected a comparison operator at column 9"),
        ("select[defined(1)]", "expected an attribute name at column 16"),
        ("mem>1 )", "unexpected ')' at column 7"),
        ("order[ut] mem>1", "expected a section name, got 'mem' at column 11"),
        ("order[]", "expected an order key at column 7"),
        ("order[ut:ut]", "duplicate order key 'ut' at column 10"),
        ("rusage[mem]", "expected '=' at column 11"),
        ("rusage[mem=x]", "expected a number for 'mem' at column 12"),
        ("rusage[duration=10]", "rusage needs a resource before duration/decay at column 8"),
        ("rusage[mem=1:decay=2]", "decay must be between 0 and 1 at column 20"),
        ("rusage[mem=1:duration=1:duration=2]", "duplicate 'duration' at column 25"),
        ("rusage[mem=1,mem=2]", "duplicate resource 'mem' at column 14"),
        ("span[hosts=2]", "only span[hosts=1] is supported at column 12"),
        ("span[ptile=0]", "ptile must be a positive integer at column 12"),
        ("span[ptile=1.5]", "ptile must be a positive integer at column 12"),
        ("span[tile=4]", "unknown span key 'tile' (expected hosts, ptile or block) at column 6"),
        ("span[ptile=2:block=2]", "span takes one of hosts, ptile or block at column 13"),
        ("same[rack:]", "expected an attribute name at column 11"),
        ("same[rack:", "unexpected end of expression at column 11"),
        ("same[rack:rack]", "duplicate attribute 'rack' at column 11"),
        ("select[a==1]]", "expected a section name, got ']' at column 13"),
    ],
)
def test_error_messages_point_at_the_column(text: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        parse_requirement(text)
    assert str(info.value) == message
    assert isinstance(info.value, InvalidRequest)
    assert info.value.code == "invalid_request"


def test_error_column_attribute() -> None:
    with pytest.raises(ExprError) as info:
        parse_requirement("select[a==1 b]")
    assert info.value.column == 13


def test_nesting_is_bounded() -> None:
    ok = "(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH
    assert sel(ok) == Flag("a")
    with pytest.raises(ExprError, match=r"^nested too deeply at column 101$"):
        parse_requirement("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(ExprError, match=r"^nested too deeply at column 101$"):
        parse_requirement("!" * 10_000 + "a")
    with pytest.raises(ExprError, match="nested too deeply"):
        parse_requirement("(!" * 60 + "a" + ")" * 60)


def test_non_string_is_rejected() -> None:
    with pytest.raises(ExprError):
        parse_requirement(None)  # type: ignore[arg-type]
