"""LSF-style resource requirement strings (`bsub -R "select[...] order[...] rusage[...]"`).

    req = parse_requirement('select[type==LINUX && mem>4000] order[-mem] span[hosts=1]')
    ok = [h for h in hosts if matches(req.select, host_attributes(h))]
    ok.sort(key=lambda h: order_key(req, host_attributes(h)))

Pure: no I/O, nothing is ever passed to `eval`.
"""

from xce.sched.expr.evaluate import as_number, host_attributes, matches, order_key
from xce.sched.expr.model import (
    And,
    Compare,
    Defined,
    Flag,
    Name,
    Node,
    Not,
    Number,
    Or,
    OrderKey,
    ResourceRequirement,
    Rusage,
    Span,
    String,
    parse_requirement,
)
from xce.sched.expr.parser import MAX_DEPTH
from xce.sched.expr.tokens import ExprError, tokenize

__all__ = [
    "MAX_DEPTH",
    "And",
    "Compare",
    "Defined",
    "ExprError",
    "Flag",
    "Name",
    "Node",
    "Not",
    "Number",
    "Or",
    "OrderKey",
    "ResourceRequirement",
    "Rusage",
    "Span",
    "String",
    "as_number",
    "host_attributes",
    "matches",
    "order_key",
    "parse_requirement",
    "tokenize",
]
