"""The job's resource requirement (`-R` text) that directives build: LSF `-R` strings, Slurm
`--constraint`, `--nodelist`/`--exclude`, `#BSUB -m`, `--tmp`, `--mincpus` and the spans
that `--nodes` implies, merged into one string XCE's parser reads (xce/sched/expr).

Why merged here: XCE allows each section (`select`, `rusage`, `span`, ...) once, while a
script may ask for several (`-R "select[a]"` and `-R "rusage[mem=1G]"`, or `--constraint`
next to `--exclude`). Selects join with `&&`, rusage items add up, a span is kept once (a
second, different one is refused naming both lines). Sizes with units become MB, which is
what XCE's resource strings count in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.cli.directives.model import Unsupported, Where
from xce.cli.directives.units import megabytes, sizes_to_megabytes, whole

if TYPE_CHECKING:
    from xce.cli.directives.request import Request

_SECTION = re.compile(r"([A-Za-z_]\w*)\s*\[")
# rusage names that are LSF built-ins (memory, swap, scratch, slots, load) and stay rusage.
_BUILTIN = frozenset({"mem", "swp", "swap", "tmp", "slots", "ut"})
_SIZES = frozenset({"mem", "swp", "swap", "tmp"})
# LSF's GPU resources (older than -gpu): a GPU count per host.
_LSF_GPUS = frozenset({"ngpus", "ngpus_physical", "ngpus_shared", "ngpus_excl_p", "ngpus_excl_t"})
_DEVICES = frozenset({"gpu"})  # XCE's own device kind in rusage[] (xce/core/gres.py)
_HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_MAX_HOSTS = 200  # each becomes `hname=="..."`: XCE resource strings hold at most 4 KB


@dataclass
class Requirement:
    """The sections asked so far, and `text()`: the one `-R` string they make."""

    selects: list[str] = field(default_factory=list)
    order: str | None = None
    rusage: list[str] = field(default_factory=list)
    span: tuple[str, Where] | None = None
    same: list[str] = field(default_factory=list)

    def add_select(self, expression: str) -> None:
        if expression.strip():
            self.selects.append(expression.strip())

    def set_span(self, body: str, at: Where) -> None:
        """One span for the job; a different second one is refused naming both lines."""
        if self.span is not None and self.span[0] != body:
            raise Unsupported(
                f"span[{body}] and span[{self.span[0]}] ({self.span[1]}) both ask how the "
                "job spreads over hosts: keep one",
                at,
            )
        self.span = (body, at)

    def slots_per_host(self) -> int | None:
        """The slots `span[ptile=P]` puts on each host (P); None without a tile."""
        if self.span is None or not self.span[0].startswith("ptile="):
            return None
        return int(self.span[0].split("=", 1)[1])

    def one_host(self) -> bool:
        return self.span is not None and self.span[0] == "hosts=1"

    def text(self) -> str:
        parts = []
        if self.selects:
            parts.append(f"select[{join_and(self.selects)}]")
        if self.order:
            parts.append(f"order[{self.order}]")
        if self.rusage:
            parts.append(f"rusage[{','.join(self.rusage)}]")
        if self.span:
            parts.append(f"span[{self.span[0]}]")
        if self.same:
            parts.append(f"same[{':'.join(dict.fromkeys(self.same))}]")
        return " ".join(parts)


def join_and(expressions: list[str]) -> str:
    """`a || b` and `c` -> `(a || b) && c`: an `||` keeps its meaning next to `&&`."""
    if len(expressions) == 1:
        return expressions[0]
    return " && ".join(f"({e})" if "||" in e and not _wrapped(e) else e for e in expressions)


def _wrapped(expression: str) -> bool:
    """Whether one pair of parentheses holds the whole expression: `(a || b)`, not
    `(a) || (b)`."""
    if not (expression.startswith("(") and expression.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(expression):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(expression) - 1:
            return False
    return True


# --- LSF -R ------------------------------------------------------------------------------------


def add_lsf(text: str, request: Request, option: str = "-R") -> None:
    """An LSF resource string: `name` (a select), `select[...] rusage[...] span[...]`, each
    section into the job's requirement; `cu[]` and `affinity[]` are warnings."""
    if "{" in text:
        raise Unsupported(
            f"{option} {text!r}: compound and alternative resource requirements ({{...}}) "
            "are not supported: give one requirement"
        )
    req = request.requirement
    for name, body in split_sections(text, option):
        if name == "select":
            req.add_select(checked(sizes_to_megabytes(body), option, text))
        elif name == "rusage":
            kept = _rusage(body, request, option)
            if kept:
                checked_section(f"rusage[{','.join(kept)}]", option, text)
            req.rusage.extend(kept)
        elif name == "span":
            req.set_span(_span(body, option), request.where)
        elif name == "order":
            if req.order is not None and req.order != body.strip():
                request.warn(f"a second order[] ({body.strip()}) is ignored: order[{req.order}]")
            else:
                req.order = checked_section(f"order[{body.strip()}]", option, text)[6:-1]
        elif name == "same":
            checked_section(f"same[{body}]", option, text)
            req.same.extend(n.strip() for n in body.split(":") if n.strip())
        elif name in ("cu", "affinity"):
            request.warn(
                f"{name}[{body}] is ignored: XCE places jobs by host, not by "
                + ("compute unit" if name == "cu" else "core or socket binding")
            )
        else:
            raise Unsupported(
                f"{option}: unknown section {name}[] (XCE reads select, order, rusage, span "
                "and same)"
            )


def checked(expression: str, option: str, given: str) -> str:
    """`expression` if XCE's parser reads it as a select, else an error naming the option:
    refused here, with the line number, rather than by the controller."""
    checked_section(f"select[{expression}]", option, given)
    return expression


def checked_section(section: str, option: str, given: str) -> str:
    from xce.core.errors import InvalidRequest
    from xce.sched.expr.parser import parse

    try:
        parse(section)
    except InvalidRequest as exc:
        raise ValueError(f"{option} {given!r}: {section}: {exc.message}") from None
    return section


def split_sections(text: str, option: str = "-R") -> list[tuple[str, str]]:
    """`"V100 rusage[mem=1G]"` -> [("select", "V100"), ("rusage", "mem=1G")]: a leading
    expression without a section name is the select, as in LSF."""
    out: list[tuple[str, str]] = []
    first = _SECTION.search(text)
    head = text[: first.start()] if first else text
    if head.strip():
        out.append(("select", head.strip()))
    pos = first.start() if first else len(text)
    while pos < len(text):
        m = _SECTION.match(text, pos)
        if m is None:
            raise ValueError(
                f"{option} {text!r}: unexpected {text[pos:].strip()!r} after a section; "
                "use NAME[...] sections"
            )
        end = _closing(text, m.end() - 1, option)
        out.append((m.group(1), text[m.end() : end]))
        pos = end + 1
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _closing(text: str, start: int, option: str) -> int:
    """The index of the `]` that closes the `[` at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"{option} {text!r}: a '[' is not closed")


def _span(body: str, option: str) -> str:
    """`hosts=1`, `ptile=N` or `block=N`: the spans XCE places (xce/sched/passes/multihost)."""
    key, _, value = body.replace(" ", "").partition("=")
    if key == "hosts" and value == "1":
        return "hosts=1"
    if key in ("ptile", "block") and value.isdigit() and int(value) >= 1:
        return f"{key}={int(value)}"
    raise Unsupported(
        f"{option}: span[{body}] is not supported: XCE reads span[hosts=1], span[ptile=N] "
        "and span[block=N]"
    )


def _rusage(body: str, request: Request, option: str) -> list[str]:
    """The rusage groups XCE keeps (memory and the like in MB, its `gpu` devices); LSF GPU
    counts (`ngpus_physical=2`) become the job's GPUs, and every other name a license
    (`matlab=1`): a cluster-wide count, which is what LSF sites use such shared resources
    for."""
    if "||" in body:
        raise Unsupported(
            f"{option}: rusage[{body}]: alternatives (||) are not supported; give one"
        )
    kept = []
    for group in body.split(","):
        resources: list[str] = []
        options: list[str] = []
        for item in (i.strip() for i in group.split(":")):
            if not item:
                continue
            name, eq, value = (p.strip() for p in item.partition("="))
            if not eq or not name or not value:
                raise ValueError(f"{option}: rusage item {item!r}: use NAME=VALUE")
            if name in ("duration", "decay"):
                options.append(f"{name}={value}")
            elif name in _SIZES:
                resources.append(f"{name}={megabytes(value)}")
            elif name in _BUILTIN or name in _DEVICES:
                resources.append(f"{name}={value}")
            elif name in _LSF_GPUS:
                request.gpus_per_host(whole(f"rusage[{name}]", value, 0))
            else:
                request.add_license(name, whole(f"rusage[{name}]", value, 0))
        if resources:
            kept.append(":".join(resources + options))
        elif options:
            request.warn(
                f"{':'.join(options)} of licenses or GPUs is ignored: XCE holds them "
                "for the whole job"
            )
    return kept


# --- hosts -------------------------------------------------------------------------------------


def host_names(text: str, option: str) -> list[str]:
    """Slurm's host list (`n[01-03],gpu7`) as names, through xce.core.hostlist."""
    from xce.core.hostlist import expand

    if "/" in text:
        raise Unsupported(
            f"{option}={text}: a host list read from a file is not supported: name the hosts"
        )
    _check_ranges(text, option)
    try:
        names = expand(text)
    except ValueError:
        raise ValueError(f"{option} {text!r}: not a host list (use h1,h2 or n[01-04,07])") from None
    for name in names:
        if not _HOST_NAME.match(name):
            raise ValueError(f"{option}: {name!r} is not a host name")
    if not names:
        raise ValueError(f"{option} needs at least one host name")
    return list(dict.fromkeys(names))


def _check_ranges(text: str, option: str) -> None:
    """Refuse a range list of more than `_MAX_HOSTS` hosts before expanding it."""
    total = 0
    for body in re.findall(r"\[([^\]]*)\]", text):
        for item in body.split(","):
            low, sep, high = item.partition("-")
            if sep and low.strip().isdigit() and high.strip().isdigit():
                total += max(0, int(high) - int(low) + 1)
            else:
                total += 1
    if total > _MAX_HOSTS:
        raise Unsupported(
            f"{option}: {total} hosts is more than a resource requirement holds "
            f"({_MAX_HOSTS}): give the hosts a host attribute and use --constraint"
        )


def hosts_select(names: list[str], exclude: bool = False) -> str:
    """`(hname=="h1" || hname=="h2")`, or `hname!="h3" && hname!="h4"` for exclusions.
    Quoted: a bare word that is also an attribute name would compare with that attribute,
    and host names may hold `-`, which a bare word cannot."""
    if len(names) > _MAX_HOSTS:
        raise Unsupported(
            f"{len(names)} hosts is more than a resource requirement holds ({_MAX_HOSTS}): "
            "give the hosts a host attribute and select it"
        )
    if exclude:
        return " && ".join(f'hname!="{n}"' for n in names)
    tests = [f'hname=="{n}"' for n in names]
    return tests[0] if len(tests) == 1 else f"({' || '.join(tests)})"


# --- Slurm --constraint ------------------------------------------------------------------------

_CONSTRAINT = re.compile(r"\s*(?:([A-Za-z0-9_.\-]+)(?:\*(\d+))?|(&|\||\(|\)|\[|\]))")
_OPERATORS = {"&": " && ", "|": " || ", "(": "(", ")": ")", "[": "(", "]": ")"}


def constraint_select(text: str, request: Request, option: str = "--constraint") -> str:
    """Slurm features as host attribute flags: `a&b` -> `a && b`, `a|b` and `[a|b]` ->
    `a || b`, parentheses kept. A feature is true on a host that defines it (xce/sched/expr:
    a flag). Counts (`a*2`) are dropped with a warning; `-` in a name becomes `_`, since an
    attribute name cannot hold it."""
    out: list[str] = []
    pos = 0
    while pos < len(text.rstrip()):
        m = _CONSTRAINT.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(
                f"{option} {text!r}: unexpected {text[pos:].strip()[:1]!r}; join features "
                "with & (and) or | (or)"
            )
        pos = m.end()
        if m.group(3):
            out.append(_OPERATORS[m.group(3)])
            continue
        out.append(_feature(m.group(1), text, request, option))
        if m.group(2):
            request.warn(
                f"the count in {m.group(0).strip()} is ignored: any host with the "
                f"feature {m.group(1)} may run any part of the job"
            )
    expression = "".join(out).strip()
    if not expression or expression.count("(") != expression.count(")"):
        raise ValueError(f"{option} {text!r}: unbalanced brackets or no feature")
    while _wrapped(expression):
        expression = expression[1:-1].strip()
    return checked(expression, option, text)


def _feature(name: str, text: str, request: Request, option: str) -> str:
    if not (name[0].isalpha() or name[0] == "_"):
        raise ValueError(
            f"{option} {text!r}: feature {name!r} cannot be a host attribute name (it must "
            "start with a letter)"
        )
    if "-" in name:
        fixed = name.replace("-", "_")
        request.warn(
            f"feature {name} is asked as the host attribute {fixed} ('-' cannot be "
            "part of an attribute name)"
        )
        return fixed
    return name


def tmp_select(megabytes_needed: int) -> str:
    """`--tmp`: hosts that declare a `tmp` attribute (MB of local scratch) must have at
    least this much; hosts that declare none are not held back, since XCE has no built-in
    measure of scratch space."""
    return f"(!defined(tmp) || tmp>={megabytes_needed})"


def hosts_for(tasks: int, per_host: int) -> int:
    """How many hosts `tasks` take at `per_host` tasks each."""
    return math.ceil(tasks / per_host)
