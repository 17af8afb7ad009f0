"""Job listing output: `--format` field specs, `--noheader` and `--parsable`.

Users coming from Slurm and LSF keep their habits: `squeue -o "%.18i %.9P %.8j"`,
`bjobs -o "jobid stat name:20" -noheader`, `sacct -P`. This module is the one place that reads
such a spec and lays out rows, so every command that lists jobs (`xce job list`, and
squeue/bjobs-style commands) prints them the same way: `render` takes the job views of
`GET /api/v1/jobs` and a spec; `table` lays out commands with their own fixed columns
(`xce acct`, `xce report`) under the same `--noheader` / `--parsable` rules.

A spec is one of two kinds:

- XCE field names (`JOB_FIELDS`), separated by commas or spaces, each with an optional
  width: `id,user,state,name:20`; `name:-20` right-aligns (bjobs' `:-N`). bjobs' own names
  (`jobid`, `stat`, `job_name`, ...; `BJOBS_NAMES`) are accepted too, in any case. Columns are
  separated by one space.
- squeue's `%` letters (`SQUEUE_LETTERS`), the text between them kept as it is: `%.18i`
  right-aligns in 18 columns, `%18i` left-aligns, `%i` is as wide as its widest value, `%%`
  is a percent sign.

A width pads a value and cuts one that is longer (its header too), as squeue and bjobs do; a
column without one is as wide as its widest value or header, so the columns line up either
way. `parsable` joins the cells with `|`, neither padded nor cut and without the text between
`%` fields (sacct -P; a `|` inside a value is not escaped, as there). `header=False` drops the
header line and nothing else: the other lines are the same. Empty values print as `-`, as in
every XCE table, so columns stay countable by `awk`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]


class FormatError(ValueError):
    """A spec this module cannot read; the message names the part at fault, on one line."""


@dataclass(frozen=True)
class Field:
    """One column a spec may name: its default header, how to read it from a job view, and
    the sentence `--help` and the docs show."""

    header: str
    value: Callable[[Row], Any]
    doc: str


@dataclass(frozen=True)
class Column:
    """A field as one spec asks for it: `before` is the text in front of it (the separator,
    or a squeue spec's own text); `width` None means as wide as its widest value."""

    field: str
    header: str
    width: int | None = None
    right: bool = False
    before: str = ""


@dataclass(frozen=True)
class Layout:
    """A parsed spec: its columns, and the text after the last one (squeue specs)."""

    columns: tuple[Column, ...]
    after: str = ""


# --- values of a job view -------------------------------------------------------------


def _local(ts: float | None) -> str | None:
    """squeue's time layout, in the user's local time (as every time the CLI prints)."""
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def duration(seconds: float | None) -> str | None:
    """`[D-]H:MM:SS`, as squeue and sacct print elapsed times and limits."""
    if seconds is None:
        return None
    s = max(round(seconds), 0)
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def size(n: float | None) -> str | None:
    """Bytes as K/M/G/T with one decimal (bjobs' MAX_MEM style)."""
    if not n:
        return None
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024:
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}T"


def _usage(row: Row) -> Mapping[str, Any]:
    return row.get("usage") or {}


def _host_names(row: Row) -> list[str]:
    return [str(h["host"]) for h in row.get("hosts") or () if h.get("host")] or (
        [str(row["host"])] if row.get("host") else []
    )


_SQUEUE_STATE = {
    "PEND": "PD",
    "PSUSP": "PD",
    "RUN": "R",
    "USUSP": "S",
    "SSUSP": "S",
    "DONE": "CD",
    "EXIT": "F",
}
_WAITING = ("PEND", "PSUSP")


def _hosts_or_reason(row: Row) -> str:
    """squeue's %R: where a started job runs, or (why) a waiting one waits."""
    if row.get("state") in _WAITING or not _host_names(row):
        return f"({row.get('reason') or 'None'})"
    return ",".join(_host_names(row))


def _elapsed(row: Row) -> str | None:
    return duration(_usage(row).get("wall_time_s")) if row.get("start_time") else None


def _gres(row: Row) -> str:
    return ",".join(f"{kind}:{count}" for kind, count in sorted((row.get("gres") or {}).items()))


def _get(key: str) -> Callable[[Row], Any]:
    return lambda row: row.get(key)


JOB_FIELDS: dict[str, Field] = {
    "id": Field(
        "JOBID",
        _get("id"),
        "job or task id: `12`, `12[3]`; `12[4-100]` for the tasks of an array not started yet",
    ),
    "array_id": Field("ARRAY_ID", _get("array_id"), "a task's array number"),
    "array_index": Field("ARRAY_INDEX", _get("array_index"), "a task's index"),
    "kind": Field("KIND", _get("kind"), "`job`, `task` or `array_pending`"),
    "name": Field("JOB_NAME", _get("name"), "the job's name, else its command"),
    "user": Field("USER", _get("user"), "the owner"),
    "queue": Field("QUEUE", _get("queue"), "the queue"),
    "state": Field(
        "STAT", _get("state"), "`PEND`, `PSUSP`, `RUN`, `USUSP`, `SSUSP`, `DONE`, `EXIT`"
    ),
    "st": Field(
        "ST",
        lambda r: _SQUEUE_STATE.get(r.get("state") or "", r.get("state")),
        "squeue's short state: `PD`, `R`, `S`, `CD`, `F`",
    ),
    "reason": Field("REASON", _get("reason"), "why it waits, or how it ended"),
    "hosts_or_reason": Field(
        "NODELIST(REASON)", _hosts_or_reason, "its hosts once started, else `(reason)`"
    ),
    "submit_host": Field("FROM_HOST", _get("submit_host"), "the host it was submitted from"),
    "exec_host": Field(
        "EXEC_HOST", lambda r: r.get("exec_host") or r.get("host"), "hosts and slots, `2*n1:2*n2`"
    ),
    "hosts": Field("HOSTS", lambda r: ",".join(_host_names(r)), "its hosts, comma-separated"),
    "nhosts": Field("NHOSTS", lambda r: len(_host_names(r)) or None, "how many hosts it runs on"),
    "slots": Field("SLOTS", _get("slots"), "slots (cores) asked for"),
    "memory": Field(
        "MEMORY",
        lambda r: f"{r['memory_mb']}M" if r.get("memory_mb") else None,
        "memory asked for per host (MB)",
    ),
    "gres": Field("GRES", _gres, "devices per host, `gpu:2`"),
    "walltime": Field(
        "TIME_LIMIT", lambda r: duration(r.get("walltime_s")), "the walltime, `[D-]H:MM:SS`"
    ),
    "submit_time": Field(
        "SUBMIT_TIME", lambda r: _local(r.get("submit_time")), "local time, `YYYY-MM-DDTHH:MM:SS`"
    ),
    "start_time": Field("START_TIME", lambda r: _local(r.get("start_time")), "local time"),
    "end_time": Field("END_TIME", lambda r: _local(r.get("end_time")), "local time"),
    "elapsed": Field("ELAPSED", _elapsed, "run time so far, `[D-]H:MM:SS`"),
    "cpu_time": Field(
        "CPU_TIME", lambda r: duration(_usage(r).get("cpu_time_s") or None), "CPU time used"
    ),
    "max_rss": Field(
        "MAX_RSS", lambda r: size(_usage(r).get("max_rss_bytes")), "peak resident memory"
    ),
    "attempt": Field("ATTEMPT", _get("attempt"), "0, then 1, 2 ... once requeued"),
    "exit_code": Field("EXIT_CODE", _get("exit_code"), "the exit status"),
    "exit_signal": Field("EXIT_SIGNAL", _get("exit_signal"), "the signal that ended it"),
}

# bjobs -o names that differ from XCE's
BJOBS_NAMES: dict[str, str] = {
    "jobid": "id",
    "stat": "state",
    "job_name": "name",
    "from_host": "submit_host",
    "pend_reason": "reason",
    "run_time": "elapsed",
    "cpu_used": "cpu_time",
    "max_mem": "max_rss",
    "finish_time": "end_time",
    "runtimelimit": "walltime",
    "nexec_host": "nhosts",
    "jobindex": "array_index",
}

# squeue letter -> (XCE field, squeue's header)
SQUEUE_LETTERS: dict[str, tuple[str, str]] = {
    "i": ("id", "JOBID"),
    "A": ("id", "JOBID"),
    "F": ("array_id", "ARRAY_JOB_ID"),
    "K": ("array_index", "ARRAY_TASK_ID"),
    "P": ("queue", "PARTITION"),
    "j": ("name", "NAME"),
    "u": ("user", "USER"),
    "t": ("st", "ST"),
    "T": ("state", "STATE"),
    "M": ("elapsed", "TIME"),
    "D": ("nhosts", "NODES"),
    "R": ("hosts_or_reason", "NODELIST(REASON)"),
    "N": ("hosts", "NODELIST"),
    "C": ("slots", "CPUS"),
    "m": ("memory", "MIN_MEMORY"),
    "b": ("gres", "TRES_PER_NODE"),
    "l": ("walltime", "TIME_LIMIT"),
    "S": ("start_time", "START_TIME"),
    "e": ("end_time", "END_TIME"),
    "V": ("submit_time", "SUBMIT_TIME"),
    "r": ("reason", "REASON"),
}

# --- parsing ----------------------------------------------------------------------------

_PERCENT = re.compile(r"%(\.?)(\d*)(.?)", re.S)
_NAMED = re.compile(r"^([A-Za-z_]+)(?::(-?)(\d+))?$")
_MAX_WIDTH = 1000  # widths are for terminals: anything wider is a typo


def parse(spec: str) -> Layout:
    """The layout a spec asks for; a mistake is a one-line `FormatError` naming it."""
    if not spec.strip():
        raise FormatError("--format is empty: name fields, e.g. id,user,state")
    return _parse_percent(spec) if "%" in spec else _parse_names(spec)


def _width(digits: str, item: str) -> int | None:
    if not digits:
        return None
    if len(digits) > len(str(_MAX_WIDTH)) or not 1 <= int(digits) <= _MAX_WIDTH:
        raise FormatError(f"--format {item!r}: a width is 1 to {_MAX_WIDTH}")
    return int(digits)


def _parse_names(spec: str) -> Layout:
    """`id,user,name:20` (or space-separated, bjobs' way)."""
    columns: list[Column] = []
    for item in (part for part in re.split(r"[,\s]+", spec) if part):
        m = _NAMED.match(item)
        name = BJOBS_NAMES.get(m.group(1).lower(), m.group(1).lower()) if m else ""
        if m is None or name not in JOB_FIELDS:
            raise FormatError(
                f"unknown --format field {item!r} (fields: {', '.join(JOB_FIELDS)}; "
                "or squeue's %-letters)"
            )
        before = " " if columns else ""
        width = _width(m.group(3) or "", item)
        columns.append(Column(name, JOB_FIELDS[name].header, width, m.group(2) == "-", before))
    if not columns:
        raise FormatError(f"--format {spec!r} names no field")
    return Layout(tuple(columns))


def _parse_percent(spec: str) -> Layout:
    """`%.18i %.9P %8j`: squeue's letters, the text between them kept."""
    columns: list[Column] = []
    text, at = "", 0
    for m in _PERCENT.finditer(spec):
        text += spec[at : m.start()]
        at = m.end()
        dot, digits, letter = m.groups()
        if letter == "%" and not dot and not digits:
            text += "%"
            continue
        if letter not in SQUEUE_LETTERS:
            raise FormatError(
                f"unknown --format field {m.group(0)!r} (squeue letters: "
                f"{' '.join('%' + k for k in SQUEUE_LETTERS)}, and %%)"
            )
        name, header = SQUEUE_LETTERS[letter]
        columns.append(Column(name, header, _width(digits, m.group(0)), bool(dot), text))
        text = ""
    if not columns:
        raise FormatError(f"--format {spec!r} names no field")
    return Layout(tuple(columns), after=text + spec[at:])


# --- layout -----------------------------------------------------------------------------


def cell(value: Any) -> str:
    """The text of one value: `-` for nothing, so every line has every column."""
    return "-" if value is None or value == "" else str(value)


def _fit(text: str, width: int, right: bool) -> str:
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def lay_out(layout: Layout, cells: Sequence[Sequence[str]], header: bool, parsable: bool) -> str:
    """The lines of `cells` (each row's texts in `layout`'s column order), header first
    unless `header` is false; every line ends with a newline."""
    lines = [[c.header for c in layout.columns], *cells] if header else list(cells)
    if parsable:
        return "".join("|".join(line) + "\n" for line in lines)
    widths = [
        c.width if c.width is not None else max(len(t) for t in [c.header, *(r[i] for r in cells)])
        for i, c in enumerate(layout.columns)
    ]
    out = []
    for line in lines:
        parts = [
            c.before + _fit(text, width, c.right)
            for c, text, width in zip(layout.columns, line, widths, strict=True)
        ]
        out.append(("".join(parts) + layout.after).rstrip() + "\n")
    return "".join(out)


def render(rows: Iterable[Row], spec: str, header: bool = True, parsable: bool = False) -> str:
    """`rows` (job views, as `GET /api/v1/jobs` lists them) laid out as `spec` asks, one line
    each. A bad spec raises `FormatError` before any row is read: call `parse(spec)` first to
    refuse it before asking the controller."""
    layout = parse(spec)
    cells = [[cell(JOB_FIELDS[c.field].value(row)) for c in layout.columns] for row in rows]
    return lay_out(layout, cells, header, parsable)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    header: bool = True,
    parsable: bool = False,
) -> str:
    """A command's own columns, aligned as `xce.cli.common.print_table` aligns them (two
    spaces apart) or `|`-separated; `header=False` drops only the header line."""
    layout = Layout(tuple(Column(h, h, before="  " if i else "") for i, h in enumerate(headers)))
    return lay_out(layout, [[cell(v) for v in row] for row in rows], header, parsable)
