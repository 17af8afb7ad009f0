"""Recursive-descent parser for LSF-style resource requirement strings (`bsub -R`).

    requirement := [expr] section*          a leading bare expression is the select
    section     := NAME '[' body ']'        select order rusage span same, each at most once
    expr        := and ('||' and)*
    and         := not ('&&' not)*
    not         := '!' not | '(' expr ')' | comparison
    comparison  := 'defined' '(' NAME ')' | operand [cmp operand]
    cmp         := '==' | '=' | '!=' | '<' | '<=' | '>' | '>='
    operand     := NAME | NUMBER | '-' NUMBER | STRING
    order       := ['-'] NAME (':' ['-'] NAME)*
    rusage      := group (',' group)*
    group       := item (':' item)*         item: NAME '=' NUMBER, or duration=N / decay=F,
                                            which apply to every resource of the group
    span        := ('hosts' | 'ptile' | 'block') '=' NUMBER
    same        := NAME (':' NAME)*

Nesting (parentheses and `!`) is bounded by `MAX_DEPTH`, so no input reaches Python's
recursion limit. Nothing is evaluated here; see `evaluate.py`.
"""

from __future__ import annotations

from xce.sched.expr.model import (
    And,
    Compare,
    Defined,
    Flag,
    Name,
    Node,
    Not,
    Number,
    Operand,
    Or,
    OrderKey,
    ResourceRequirement,
    Rusage,
    Span,
    String,
)
from xce.sched.expr.tokens import ExprError, Kind, Lexer, Token

MAX_DEPTH = 100
SECTIONS = ("select", "order", "rusage", "span", "same")
COMPARISONS = {"==": "==", "=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_RUSAGE_OPTIONS = ("duration", "decay")


def parse(text: str) -> ResourceRequirement:
    """Parse without the cache; `model.parse_requirement` is the cached entry point."""
    return _Parser(text).requirement()


class _Parser:
    def __init__(self, text: str) -> None:
        self.lex = Lexer(text)
        self.depth = 0

    # -- helpers -------------------------------------------------------------------------

    def fail(self, tok: Token, message: str | None = None) -> ExprError:
        if tok.kind is Kind.END:
            return ExprError("unexpected end of expression", tok.column)
        return ExprError(message or f"unexpected {tok.describe()}", tok.column)

    def is_op(self, text: str, n: int = 0) -> bool:
        tok = self.lex.peek(n)
        return tok.kind is Kind.OP and tok.text == text

    def accept(self, text: str) -> bool:
        if self.is_op(text):
            self.lex.next()
            return True
        return False

    def expect(self, text: str) -> Token:
        tok = self.lex.next()
        if tok.kind is not Kind.OP or tok.text != text:
            raise self.fail(tok, f"expected {text!r}")
        return tok

    def name(self, what: str = "a name") -> Token:
        tok = self.lex.next()
        if tok.kind is not Kind.NAME:
            raise self.fail(tok, f"expected {what}")
        return tok

    def number(self, what: str = "a number") -> Token:
        tok = self.lex.next()
        if tok.kind is not Kind.NUMBER:
            raise self.fail(tok, f"expected {what}")
        return tok

    # -- the whole string ----------------------------------------------------------------

    def requirement(self) -> ResourceRequirement:
        seen: set[str] = set()
        select: Node | None = None
        order: tuple[OrderKey, ...] = ()
        rusage: tuple[Rusage, ...] = ()
        span: Span | None = None
        same: tuple[str, ...] = ()
        while self.lex.peek().kind is not Kind.END:
            tok = self.lex.peek()
            if tok.kind is Kind.NAME and self.is_op("[", 1):
                if tok.text not in SECTIONS:
                    raise ExprError(f"unknown section {tok.text!r}", tok.column)
                if tok.text in seen:
                    raise ExprError(f"duplicate section {tok.text!r}", tok.column)
                seen.add(tok.text)
                self.lex.next()
                self.lex.next()
                if tok.text == "select":
                    select = self.expr()
                elif tok.text == "order":
                    order = self.section_order()
                elif tok.text == "rusage":
                    rusage = self.section_rusage()
                elif tok.text == "span":
                    span = self.section_span()
                else:
                    same = self.section_same()
                self.expect("]")
            elif not seen:
                # LSF: a string without a section keyword is a select expression.
                seen.add("select")
                select = self.expr()
                after = self.lex.peek()
                if after.kind is not Kind.END and not (
                    after.kind is Kind.NAME and self.is_op("[", 1)
                ):
                    raise self.fail(after)
            else:
                raise self.fail(tok, f"expected a section name, got {tok.describe()}")
        return ResourceRequirement(select, order, rusage, span, same)

    # -- select --------------------------------------------------------------------------

    def expr(self) -> Node:
        items = [self.conj()]
        while self.accept("||"):
            items.append(self.conj())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def conj(self) -> Node:
        items = [self.unary()]
        while self.accept("&&"):
            items.append(self.unary())
        return items[0] if len(items) == 1 else And(tuple(items))

    def unary(self) -> Node:
        tok = self.lex.peek()
        if tok.kind is Kind.OP and tok.text in ("!", "("):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExprError("nested too deeply", tok.column)
            self.lex.next()
            if tok.text == "!":
                node: Node = Not(self.unary())
            else:
                node = self.expr()
                self.expect(")")
            self.depth -= 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        tok = self.lex.peek()
        if tok.kind is Kind.NAME and tok.text == "defined" and self.is_op("(", 1):
            self.lex.next()
            self.lex.next()
            name = self.name("an attribute name")
            self.expect(")")
            return Defined(name.text)
        left = self.operand()
        op = self.lex.peek()
        if op.kind is Kind.OP and op.text in COMPARISONS:
            self.lex.next()
            return Compare(COMPARISONS[op.text], left, self.operand())
        if isinstance(left, Name):
            return Flag(left.name)
        raise self.fail(op, "expected a comparison operator")

    def operand(self) -> Operand:
        tok = self.lex.next()
        if tok.kind is Kind.NAME:
            return Name(tok.text)
        if tok.kind is Kind.STRING:
            return String(tok.text)
        if tok.kind is Kind.NUMBER:
            assert tok.value is not None
            return Number(tok.value)
        if tok.kind is Kind.OP and tok.text == "-" and self.lex.peek().kind is Kind.NUMBER:
            value = self.lex.next().value
            assert value is not None
            return Number(-value)
        raise self.fail(tok, f"expected an operand, got {tok.describe()}")

    # -- order ---------------------------------------------------------------------------

    def section_order(self) -> tuple[OrderKey, ...]:
        keys: list[OrderKey] = []
        seen: set[str] = set()
        while True:
            descending = self.accept("-")
            tok = self.name("an order key")
            if tok.text in seen:
                raise ExprError(f"duplicate order key {tok.text!r}", tok.column)
            seen.add(tok.text)
            keys.append(OrderKey(tok.text, descending))
            if not self.accept(":"):
                return tuple(keys)

    # -- rusage --------------------------------------------------------------------------

    def section_rusage(self) -> tuple[Rusage, ...]:
        out: list[Rusage] = []
        names: set[str] = set()
        while True:
            out.extend(self.rusage_group(names))
            if not self.accept(","):
                return tuple(out)

    def rusage_group(self, names: set[str]) -> list[Rusage]:
        resources: list[tuple[str, int | float]] = []
        options: dict[str, int | float] = {}
        start = self.lex.peek()
        while True:
            tok = self.name("a resource name")
            self.expect("=")
            value = self.number(f"a number for {tok.text!r}")
            assert value.value is not None
            if tok.text in _RUSAGE_OPTIONS:
                if tok.text in options:
                    raise ExprError(f"duplicate {tok.text!r}", tok.column)
                if tok.text == "decay" and not 0 <= value.value <= 1:
                    raise ExprError("decay must be between 0 and 1", value.column)
                options[tok.text] = value.value
            else:
                if options:
                    raise ExprError(
                        f"resource {tok.text!r} after duration/decay; separate groups with ','",
                        tok.column,
                    )
                if tok.text in names:
                    raise ExprError(f"duplicate resource {tok.text!r}", tok.column)
                names.add(tok.text)
                resources.append((tok.text, value.value))
            if not self.accept(":"):
                break
        if not resources:
            raise ExprError("rusage needs a resource before duration/decay", start.column)
        return [
            Rusage(name, value, options.get("duration"), options.get("decay"))
            for name, value in resources
        ]

    # -- span ----------------------------------------------------------------------------

    def section_span(self) -> Span:
        tok = self.name("hosts, ptile or block")
        if tok.text not in ("hosts", "ptile", "block"):
            raise ExprError(
                f"unknown span key {tok.text!r} (expected hosts, ptile or block)", tok.column
            )
        self.expect("=")
        value = self.number(f"a number for {tok.text!r}")
        if not isinstance(value.value, int) or value.value < 1:
            raise ExprError(f"{tok.text} must be a positive integer", value.column)
        if tok.text == "hosts" and value.value != 1:
            raise ExprError("only span[hosts=1] is supported", value.column)
        if self.is_op(":"):
            raise ExprError("span takes one of hosts, ptile or block", self.lex.peek().column)
        return Span(**{tok.text: value.value})

    # -- same ----------------------------------------------------------------------------

    def section_same(self) -> tuple[str, ...]:
        names: list[str] = []
        while True:
            tok = self.name("an attribute name")
            if tok.text in names:
                raise ExprError(f"duplicate attribute {tok.text!r}", tok.column)
            names.append(tok.text)
            if not self.accept(":"):
                return tuple(names)
