"""Job script directives: `#XCE`, and `#BSUB` / `#SBATCH` for scripts migrated from LSF/Slurm.

Why: users keep their options in the script (`sbatch job.sh`, `bsub < job.sh`); ignoring
those lines silently runs a 4-task job on one slot. Only the leading comment block counts,
as with sbatch: after an optional `#!` line, lines that are blank or start with `#`, up to the
first command. Each directive becomes the value of one `xce job submit` option, named as the
`submit` function's parameters (`slots`, `memory`, `walltime`, `queue`, `name`, `stdout`,
`stderr`, `array`, `dependency`, `hold`, `cwd`, `resources`, `export`, `begin`); options given
on the command line win over directives.

A directive this module does not know is a `DirectiveError` naming the line, or a warning
with `lenient`. Mail options are accepted with a warning (XCE sends no mail). GPUs become a
placement requirement `select[gpu>=N]` on the host attribute `gpu` (XCE does not count or
assign GPUs yet); `#SBATCH --exclusive` and `#BSUB -x` ask for whole hosts, `#SBATCH
--mem-per-cpu` for memory per slot. Pure: no I/O (bsub -b reads today's date for the parts
it leaves out), so it is tested with tables of lines.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFIXES = ("#XCE", "#BSUB", "#SBATCH")


class DirectiveError(ValueError):
    def __init__(self, line: int, text: str, problem: str) -> None:
        super().__init__(f"line {line}: {text.strip()!r}: {problem}")
        self.line = line


@dataclass
class Directives:
    """What the directives asked for (submit parameter -> value) and what was ignored."""

    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


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


def parse(
    script: str, parse_xce: Callable[[list[str]], dict[str, Any]], lenient: bool = False
) -> Directives:
    """The directives of `script`. `parse_xce(tokens)` parses `#XCE` options as the command
    line does and returns the options given (so `#XCE` needs no second option table)."""
    result = Directives()
    state = _Collect()
    for number, prefix, rest in directive_lines(script):
        try:
            tokens = shlex.split(rest, comments=False)
        except ValueError as exc:
            raise DirectiveError(number, f"{prefix} {rest}", str(exc)) from None
        try:
            if prefix == "#XCE":
                state.options.update(parse_xce(tokens))
            elif prefix == "#SBATCH":
                _sbatch(tokens, state)
            else:
                _bsub(tokens, state)
        except _Unsupported as exc:
            message = f"line {number}: {prefix} {rest!r}: {exc}"
            if not lenient:
                raise DirectiveError(number, f"{prefix} {rest}", str(exc)) from None
            result.warnings.append(f"{message} (ignored: --lenient)")
        except _Ignored as exc:
            result.warnings.append(f"line {number}: {prefix} {rest!r}: {exc}")
        except (ValueError, IndexError) as exc:
            raise DirectiveError(number, f"{prefix} {rest}", str(exc) or "bad value") from None
    result.options = state.finish()
    return result


class _Unsupported(Exception):
    """Known or unknown, but XCE cannot do it: an error unless lenient."""


class _Ignored(Exception):
    """Accepted with a warning (mail options)."""


@dataclass
class _Collect:
    options: dict[str, Any] = field(default_factory=dict)
    tasks: int | None = None
    cpus_per_task: int | None = None
    per_node: int | None = None
    mem_per_cpu: int | None = None
    gpus: int | None = None
    resources: list[str] = field(default_factory=list)

    def finish(self) -> dict[str, Any]:
        out = dict(self.options)
        if self.tasks is not None or self.cpus_per_task is not None or self.per_node:
            tasks = self.tasks if self.tasks is not None else (self.per_node or 1)
            out["slots"] = tasks * (self.cpus_per_task or 1)
        if self.mem_per_cpu is not None:
            out["memory"] = self.mem_per_cpu * int(out.get("slots", 1))
        if self.gpus:
            out["gpus"] = self.gpus  # counted and bound as generic resources (--gpus)
        if self.resources:
            out["resources"] = " ".join([*filter(None, [out.get("resources")]), *self.resources])
        return out


# --- sizes and times -------------------------------------------------------------------------

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTkmgt]?)[Bb]?$")


def megabytes(text: str, default_unit: str = "M") -> int:
    """`4000`, `4G`, `512M`, `1.5G`, `100K` -> MB (at least 1 for a non-zero size)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"memory size {text!r}: use a number with K, M, G or T")
    factor = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[
        (m.group(2) or default_unit).upper()
    ]
    value = float(m.group(1)) * factor
    return max(1, round(value)) if value else 0


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_seconds(text: str) -> int:
    """Slurm times: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`."""
    m = _SLURM_TIME.match(text.strip())
    if not m or text.strip() in ("", "-"):
        raise ValueError(f"time {text!r}: use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    days, a, b, c = m.groups()
    if days is not None:
        h, mi, s = int(a), int(b or 0), int(c or 0)
        return int(days) * 86400 + h * 3600 + mi * 60 + s
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:
        return int(a) * 60 + int(b)
    return int(a) * 60


# --- #SBATCH ------------------------------------------------------------------------------------

_SBATCH_SHORT = {
    "-n": "--ntasks",
    "-c": "--cpus-per-task",
    "-N": "--nodes",
    "-t": "--time",
    "-p": "--partition",
    "-J": "--job-name",
    "-o": "--output",
    "-e": "--error",
    "-a": "--array",
    "-d": "--dependency",
    "-H": "--hold",
    "-D": "--chdir",
    "-G": "--gpus",
    "-i": "--input",
    "-A": "--account",
    "-q": "--qos",
    "-w": "--nodelist",
    "-x": "--exclude",
    "-C": "--constraint",
}
_SBATCH_FLAGS = {"--hold", "--exclusive", "--requeue", "--no-requeue"}
_PLAIN = {
    "--partition": "queue",
    "--job-name": "name",
    "--output": "stdout",
    "--error": "stderr",
    "--array": "array",
    "--dependency": "dependency",
    "--chdir": "cwd",
    "--export": "export",
    "--reservation": "reservation",
    "--begin": "begin",
}


def _sbatch(tokens: list[str], s: _Collect) -> None:
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        name, eq, value = token.partition("=")
        if not name.startswith("--") and len(name) > 2 and name[:2] in _SBATCH_SHORT:
            name, value, eq = name[:2], name[2:], "="  # -n4
        name = _SBATCH_SHORT.get(name, name)
        if not eq and name not in _SBATCH_FLAGS:
            if i >= len(tokens):
                raise ValueError(f"{token} needs a value")
            value = tokens[i]
            i += 1
        _sbatch_one(name, value, s)


def _sbatch_one(name: str, value: str, s: _Collect) -> None:
    if name in _PLAIN:
        s.options[_PLAIN[name]] = value
    elif name == "--ntasks":
        s.tasks = int(value)
    elif name == "--cpus-per-task":
        s.cpus_per_task = int(value)
    elif name == "--ntasks-per-node":
        s.per_node = int(value)
    elif name == "--nodes":
        if value.split("-")[0] != "1":
            raise _Unsupported("a job runs on one host in XCE (--nodes=1 only)")
    elif name == "--mem":
        s.options["memory"] = megabytes(value)
    elif name == "--mem-per-cpu":
        s.mem_per_cpu = megabytes(value)
    elif name == "--time":
        s.options["walltime"] = f"{slurm_seconds(value)}s"
    elif name == "--hold":
        s.options["hold"] = True
    elif name in ("--gpus", "--gpus-per-node", "--gres"):
        s.gpus = _gpu_count(value)
    elif name == "--exclusive":
        s.options["exclusive"] = True
    elif name in ("--mail-type", "--mail-user"):
        raise _Ignored("XCE sends no mail; ignored")
    else:
        raise _Unsupported(f"unknown or unsupported #SBATCH option {name}")


def _gpu_count(value: str) -> int:
    """`2`, `gpu:2`, `gpu:a100:2`, `a100:2` -> 2."""
    last = value.split(",")[0].split(":")[-1]
    if not last.isdigit():
        if value.split(":")[0] == "gpu" and value.count(":") <= 1:
            return 1
        raise ValueError(f"GPU count {value!r}")
    return int(last)


# --- #BSUB --------------------------------------------------------------------------------------

_BSUB_PLAIN = {
    "-q": "queue",
    "-o": "stdout",
    "-oo": "stdout",
    "-e": "stderr",
    "-eo": "stderr",
    "-cwd": "cwd",
    "-env": "export",
    "-U": "reservation",
}
_LSF_BEGIN = re.compile(r"^(?:(?:(?:(\d{4}):)?(\d{1,2}):)?(\d{1,2}):)?(\d{1,2}):(\d{2})$")
_BSUB_FLAGS = {"-H", "-x", "-B", "-N", "-r", "-rn", "-I", "-K"}
_LSF_DEP = re.compile(r"^\s*(done|ended|exit|post_done|post_err)\(\s*([^)]+?)\s*\)\s*$")
_LSF_KIND = {
    "done": "afterok",
    "post_done": "afterok",
    "ended": "afterany",
    "exit": "afternotok",
    "post_err": "afternotok",
}
_NAME_ARRAY = re.compile(r"^(.*?)\[([^\]]+)\](%\d+)?$")


def _bsub(tokens: list[str], s: _Collect) -> None:
    i = 0
    while i < len(tokens):
        name = tokens[i]
        i += 1
        value = ""
        if name not in _BSUB_FLAGS:
            if i >= len(tokens):
                raise ValueError(f"{name} needs a value")
            value = tokens[i]
            i += 1
        _bsub_one(name, value, s)


def _bsub_one(name: str, value: str, s: _Collect) -> None:
    if name in _BSUB_PLAIN:
        s.options[_BSUB_PLAIN[name]] = value
    elif name == "-n":
        s.tasks = int(value.split(",")[0])
    elif name == "-M":
        s.options["memory"] = megabytes(value)
    elif name == "-W":
        s.options["walltime"] = value
    elif name == "-R":
        s.resources.append(value)  # span[ptile=N] below -n spreads the job
    elif name == "-J":
        m = _NAME_ARRAY.match(value)
        if m:
            s.options["name"] = m.group(1)
            s.options["array"] = m.group(2) + (m.group(3) or "")
        else:
            s.options["name"] = value
    elif name == "-w":
        s.options["dependency"] = _lsf_dependency(value)
    elif name == "-H":
        s.options["hold"] = True
    elif name == "-b":
        s.options["begin"] = lsf_begin(value)
    elif name == "-gpu":
        fields = dict(p.partition("=")[::2] for p in value.split(":") if "=" in p)
        s.gpus = int(fields.get("num", "1"))
    elif name == "-x":
        s.options["exclusive"] = True
    elif name in ("-B", "-N", "-u"):
        raise _Ignored("XCE sends no mail; ignored")
    else:
        raise _Unsupported(f"unknown or unsupported #BSUB option {name}")


def lsf_begin(text: str) -> str:
    """bsub -b `[[[YYYY:]MM:]DD:]hh:mm` -> the `--begin` text (`YYYY-MM-DDThh:mm` local, or
    `hh:mm`: today, tomorrow once passed); missing year, month, day are the current ones."""
    m = _LSF_BEGIN.match(text.strip())
    if m is None:
        raise ValueError(f"begin time {text!r}: use [[[YYYY:]MM:]DD:]hh:mm")
    year, month, day, hour, minute = m.groups()
    if day is None:
        return f"{int(hour):02d}:{minute}"
    now = time.localtime()
    return (
        f"{int(year or now.tm_year):04d}-{int(month or now.tm_mon):02d}-{int(day):02d}"
        f"T{int(hour):02d}:{minute}"
    )


def _lsf_dependency(text: str) -> str:
    if "||" in text:
        raise _Unsupported("'||' in a dependency is not supported (all terms must hold)")
    terms = []
    for part in text.split("&&"):
        m = _LSF_DEP.match(part)
        if m is None:
            if part.strip().isdigit():  # `-w 123` means done(123)
                terms.append(f"afterok:{part.strip()}")
                continue
            raise ValueError(
                f"dependency {part.strip()!r}: use done(ID), ended(ID) or exit(ID) joined by &&"
            )
        terms.append(f"{_LSF_KIND[m.group(1)]}:{m.group(2)}")
    return ",".join(terms)
