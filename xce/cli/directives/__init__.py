"""Job script directives: `#XCE`, and `#BSUB` / `#SBATCH` for scripts migrated from LSF/Slurm.

Why: users keep their options in the script (`sbatch job.sh`, `bsub < job.sh`); ignoring
those lines silently runs a 4-task job on one slot. Only the leading comment block counts,
as with sbatch: after an optional `#!` line, lines that are blank or start with `#`, up to the
first command (a script without `#!`, as `bsub < job.sh` takes, may start with a directive).
A `# comment` after a directive's options is dropped, as sbatch and bsub do; a `#` inside
quotes or inside a word (`-o out#1`) is kept.

Each directive becomes the value of one `xce job submit` option, named as the `submit`
function's parameters (`slots`, `memory`, `mem_per_cpu`, `walltime`, `queue`, `name`,
`stdout`, `stderr`, `array`, `dependency`, `hold`, `cwd`, `resources`, `export`, `begin`,
`gpus`, `exclusive`, `account`, `qos`, `licenses`, `reservation`); options given on the
command line win over directives. Slurm's tasks, nodes and CPUs per task become slots and
a span (`--nodes=2 --ntasks-per-node=4` is 8 slots, `span[ptile=4]`); host lists,
constraints and `--tmp` become a `select[]` on host attributes (`hname` is the host's name).

A directive XCE cannot honour is a `DirectiveError` naming the line, or a warning with
`lenient`; one whose effect XCE does not have (mail, CPU binding, ...) is accepted with a
warning that says what XCE does instead. The tables of what each option becomes are in
`slurm.py` and `lsf.py`. Pure: no I/O (bsub -b reads today's date for the parts it leaves
out), so it is tested with tables of lines.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xce.cli.directives.model import DirectiveError, Directives, Unsupported, Where
from xce.cli.directives.units import lsf_begin, megabytes, slurm_seconds

# The Slurm and LSF tables (`slurm`, `lsf`, `request`) are imported by `parse`, not here:
# `xce job submit` reads a memory size (`megabytes`) or looks for directives on every call,
# and must not pay for translating dialects a plain command never uses.

if TYPE_CHECKING:
    from xce.cli.directives.request import Request

PREFIXES = ("#XCE", "#BSUB", "#SBATCH")

__all__ = [
    "PREFIXES",
    "DirectiveError",
    "Directives",
    "directive_lines",
    "lsf_begin",
    "megabytes",
    "parse",
    "slurm_seconds",
    "strip_comment",
]


def directive_lines(script: str) -> list[tuple[int, str, str]]:
    """(line number, prefix, the rest) for each directive of the leading comment block."""
    out = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        for prefix in PREFIXES:
            if stripped.startswith(prefix) and stripped[len(prefix) : len(prefix) + 1] in " \t":
                out.append((number, prefix, stripped[len(prefix) :].strip()))
    return out


def strip_comment(text: str) -> str:
    """`--time=01:00:00   # one hour` -> `--time=01:00:00`: a `#` that starts a word,
    outside quotes, starts a comment (as in the shell); `"a # b"` and `out#1` keep theirs."""
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text


def parse(
    script: str, parse_xce: Callable[[list[str]], dict[str, Any]], lenient: bool = False
) -> Directives:
    """The directives of `script`. `parse_xce(tokens)` parses `#XCE` options as the command
    line does and returns the options given (so `#XCE` needs no second option table)."""
    from xce.cli.directives.request import Request

    request = Request(lenient=lenient)
    for number, prefix, rest in directive_lines(script):
        words = strip_comment(rest)
        text = f"{prefix} {words}"
        request.where = Where(number, text)
        try:
            _one_line(prefix, words, request, parse_xce)
        except Unsupported as exc:
            raise _error(exc, request.where) from None
        except (ValueError, IndexError) as exc:
            raise DirectiveError(number, text, str(exc) or "bad value") from None
    try:
        options = request.finish()
    except Unsupported as exc:
        raise _error(exc, request.where) from None
    return Directives(options, request.warnings)


def _one_line(
    prefix: str, rest: str, request: Request, parse_xce: Callable[[list[str]], dict[str, Any]]
) -> None:
    try:
        tokens = shlex.split(rest, comments=False)
    except ValueError as exc:
        raise ValueError(f"{exc} (check the quotes)") from None
    if prefix == "#XCE":
        request.xce_options(parse_xce(tokens))
    elif prefix == "#SBATCH":
        from xce.cli.directives import slurm

        slurm.apply(tokens, request)
    else:
        from xce.cli.directives import lsf

        lsf.apply(tokens, request)


def _error(exc: Unsupported, current: Where) -> DirectiveError:
    """The refusal, naming the line it is about; with `--lenient` refusals of single
    options are warnings already (`Request.refuse`), so this is a whole-line one."""
    at = exc.at or current
    return DirectiveError(at.line, at.text, str(exc))
