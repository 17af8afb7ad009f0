"""What the familiar commands print: state letters and words, times, job ids, reasons, and
the `%` format strings of squeue and sinfo.

Why one module: the same job is shown by squeue, bjobs and qstat, and scripts compare the
letters (`squeue -h -t PD`, `qstat | grep " Q "`), so each mapping is written once and tested
as a table. Pure (no I/O, no client): the tools in slurm.py, lsf.py and pbs.py fetch and
call these.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DOC = "docs/migration.md#familiar-commands"

ACTIVE = ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP")
FINISHED = ("DONE", "EXIT")
ALL_STATES = ACTIVE + FINISHED

Row = Mapping[str, Any]

# --- states -------------------------------------------------------------------------------


def end_kind(state: str, reason: str | None) -> str:
    """How a finished job ended, read from its state and reason (the worker's and the
    controller's words): completed, cancelled, timeout, oom, node_fail or failed."""
    if state == "DONE":
        return "completed"
    text = (reason or "").lower()
    if text.startswith("killed on its host") or "host unavailable" in text:
        return "node_fail"
    if text.startswith("killed"):
        return "cancelled"
    if "walltime limit exceeded" in text:
        return "timeout"
    if text.startswith("memory limit") and "exceeded" in text:
        return "oom"
    return "failed"


_SLURM_ACTIVE = {
    "PEND": ("PD", "PENDING"),
    "PSUSP": ("PD", "PENDING"),  # held: pending with reason JobHeldUser, as in Slurm
    "RUN": ("R", "RUNNING"),
    "USUSP": ("S", "SUSPENDED"),
    "SSUSP": ("S", "SUSPENDED"),
}
_SLURM_ENDS = {
    "completed": ("CD", "COMPLETED"),
    "cancelled": ("CA", "CANCELLED"),
    "timeout": ("TO", "TIMEOUT"),
    "oom": ("OOM", "OUT_OF_MEMORY"),
    "node_fail": ("NF", "NODE_FAIL"),
    "failed": ("F", "FAILED"),
}


def slurm_state(state: str, reason: str | None = None) -> tuple[str, str]:
    """(squeue's %t letter, its %T word) for an XCE state; `REQUEUED` (an accounting
    record's) is Slurm's own."""
    if state in _SLURM_ACTIVE:
        return _SLURM_ACTIVE[state]
    if state == "REQUEUED":
        return ("RQ", "REQUEUED")
    return _SLURM_ENDS[end_kind(state, reason)]


# squeue -t / sacct -s words -> the XCE states to ask for (the letter is then checked).
_SLURM_NAMES = {
    "PD": ("PEND", "PSUSP"),
    "PENDING": ("PEND", "PSUSP"),
    "R": ("RUN",),
    "RUNNING": ("RUN",),
    "S": ("USUSP", "SSUSP"),
    "SUSPENDED": ("USUSP", "SSUSP"),
    "CD": ("DONE",),
    "COMPLETED": ("DONE",),
    **{letter: ("EXIT",) for letter in ("F", "CA", "TO", "OOM", "NF")},
    **{word: ("EXIT",) for word in ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY")},
    "NODE_FAIL": ("EXIT",),
    "RQ": ("REQUEUED",),
    "REQUEUED": ("REQUEUED",),
}


def slurm_state_filter(text: str) -> tuple[set[str], set[str]] | None:
    """`-t PD,R` -> (XCE states to fetch, Slurm letters to keep); None for `all`.
    An unknown name is a ValueError naming it."""
    states: set[str] = set()
    letters: set[str] = set()
    for word in (w.strip().upper() for w in text.split(",") if w.strip()):
        if word == "ALL":
            return None
        if word not in _SLURM_NAMES:
            raise ValueError(f"invalid job state {word!r}")
        states.update(_SLURM_NAMES[word])
        letters.add(word if len(word) <= 3 else _LONG_TO_LETTER[word])
    return states, letters


_LONG_TO_LETTER = {long: short for short, long in [*_SLURM_ACTIVE.values(), *_SLURM_ENDS.values()]}
_LONG_TO_LETTER["REQUEUED"] = "RQ"

PBS_STATE = {
    "PEND": "Q",
    "PSUSP": "H",
    "RUN": "R",
    "USUSP": "S",
    "SSUSP": "S",
    "DONE": "F",
    "EXIT": "F",
}


# --- reasons ------------------------------------------------------------------------------

# The scheduler's reason texts (xce/sched/reasons.py) by how they start -> Slurm's codes.
_REASONS: tuple[tuple[str, str], ...] = (
    ("waiting for free slots or memory", "Resources"),
    ("waiting for free devices", "Resources"),
    ("waiting for license", "Licenses"),
    ("no host is big enough", "BadConstraints"),
    ("no set of hosts", "BadConstraints"),
    ("no host has", "BadConstraints"),
    ("no online host matches", "ReqNodeNotAvail"),
    ("no online host in the queue", "ReqNodeNotAvail"),
    ("begin time not reached", "BeginTime"),
    ("waiting for dependency", "Dependency"),
    ("dependency can never be satisfied", "DependencyNeverSatisfied"),
    ("array concurrency limit", "JobArrayTaskLimit"),
    ("reservation", "Reservation"),
    ("waiting for reservation", "Reservation"),
)


def slurm_reason(state: str, reason: str | None) -> str:
    """squeue's REASON word for a pending job (`None` when there is none yet)."""
    if state == "PSUSP":
        return "JobHeldUser"
    text = (reason or "").strip()
    if not text:
        return "None"
    if text.startswith("queue ") and text.endswith(" is inactive"):
        return "PartitionInactive"
    if text.startswith("queue ") and "limit" in text:
        return "PartitionJobLimit"
    if text.startswith("user ") and "limit" in text:
        return "QOSMaxJobsPerUserLimit"
    for start, code in _REASONS:
        if text.startswith(start):
            return code
    return "Priority"


# --- times --------------------------------------------------------------------------------


def slurm_duration(seconds: float | None) -> str:
    """Slurm's elapsed and limit form: `0:05`, `12:34`, `1:02:03`, `2-03:04:05`."""
    s = max(0, int(seconds or 0))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def slurm_limit(seconds: float | None, none: str = "UNLIMITED") -> str:
    return none if not seconds else slurm_duration(seconds)


def slurm_timestamp(ts: float | None, none: str = "Unknown") -> str:
    """`2026-03-04T10:51:02` in local time, as sacct and scontrol print times."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else none


def lsf_time(ts: float | None) -> str:
    """bjobs' SUBMIT_TIME: `Mar  4 10:51`, local time."""
    return time.strftime("%b %e %H:%M", time.localtime(ts)) if ts else "-"


def hms(seconds: float | None) -> str:
    """qstat's `Time Use`: `HH:MM:SS`, the hours not capped."""
    s = max(0, int(seconds or 0))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


# --- job ids ------------------------------------------------------------------------------


def slurm_job_id(xce_id: str) -> str:
    """`17[5]` -> `17_5`; the unstarted rest of an array `17[3-10]` -> `17_[3-10]`."""
    head, bracket, rest = xce_id.partition("[")
    if not bracket:
        return xce_id
    inner = rest[:-1]
    return f"{head}_{inner}" if inner.isdigit() else f"{head}_[{inner}]"


def _indices(text: str, limit: int = 100_000) -> list[int]:
    """`1-3,7` -> [1, 2, 3, 7]; a ValueError for anything else or too many."""
    out: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(part)
        out.extend(range(int(low), int(high if dash else low) + 1))
        if len(out) > limit:
            raise ValueError("too many array indices")
    return out


def xce_job_ids(text: str) -> list[str]:
    """A job id as Slurm, LSF or PBS users write it -> XCE's ids.

    `17`, `17_5` and `17[5]` (a task), `17_[1-3,7]` and `17[1-3]` (tasks), `17[]` (the whole
    array, PBS), and PBS's server suffix `17.server` / `17[5].server`. A ValueError names
    what is not an id."""
    word = text.strip()
    head, dot, server = word.partition(".")
    if dot and server and not server[:1].isdigit():
        word = head
    try:
        if "_" in word:
            number, _, index = word.partition("_")
            if index.startswith("[") and index.endswith("]"):
                index = index[1:-1]
            if not number.isdigit():
                raise ValueError(word)
            return [f"{number}[{i}]" for i in _indices(index)]
        if word.endswith("]") and "[" in word:
            number, _, index = word[:-1].partition("[")
            if not number.isdigit():
                raise ValueError(word)
            if not index:
                return [number]
            return [f"{number}[{i}]" for i in _indices(index)]
        if word.isdigit():
            return [word]
    except ValueError:
        pass
    raise ValueError(f"invalid job id {text!r}")


# --- hosts --------------------------------------------------------------------------------


def host_names(job: Row) -> list[str]:
    return [str(p["host"]) for p in job.get("hosts") or [] if p.get("host")] or (
        [str(job["host"])] if job.get("host") else []
    )


def sinfo_node_state(host: Row) -> str:
    """sinfo's short node state: idle, mix, alloc, drain, drng, down*."""
    if host.get("status") != "online":
        return "down*"
    used, slots = int(host.get("slots_used") or 0), int(host.get("slots") or 0)
    admin = host.get("admin") or "open"
    if admin != "open":
        return "drng" if used else "drain"
    if used == 0:
        return "idle"
    return "alloc" if used >= slots else "mix"


def sinfo_avail(queue: Row) -> str:
    """A queue's Slurm partition state: open and active `up`, closed `drain` (no new jobs,
    running ones go on), inactive `down` (takes jobs, starts none), both `inact`."""
    is_open, active = bool(queue.get("open", True)), bool(queue.get("active", True))
    if is_open:
        return "up" if active else "down"
    return "drain" if active else "inact"


def lsf_host_status(host: Row) -> str:
    """bhosts' STATUS: ok, closed (by an admin, or full), unavail."""
    if host.get("status") != "online":
        return "unavail"
    if (host.get("admin") or "open") != "open":
        return "closed"
    full = int(host.get("slots_used") or 0) >= int(host.get("slots") or 0)
    return "closed" if full else "ok"


def slurm_exit_code(record: Row) -> str:
    """Slurm's `code:signal`: a job killed by a signal shows `0:9`."""
    signal = record.get("exit_signal")
    if signal:
        return f"0:{signal}"
    return f"{record.get('exit_code') or 0}:0"


# sinfo's short node states -> their long words (%T, scontrol's State=, upper case)
SINFO_LONG_STATE = {
    "idle": "idle",
    "mix": "mixed",
    "alloc": "allocated",
    "drain": "drained",
    "drng": "draining",
    "down*": "down*",
    "n/a": "n/a",
}


def queue_hosts(queue: Row, hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hosts a queue runs on: its list (names and `@group`s), or every host."""
    names = list(queue.get("hosts") or [])
    if not names or "all" in names:
        return hosts
    groups = {n[1:] for n in names if n.startswith("@")}
    return [h for h in hosts if h["name"] in names or (h.get("group") in groups)]


# --- % formats (squeue -o, sinfo -o) ------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One `%[.][width]X` of a format string, or literal text (`letter` empty)."""

    letter: str
    width: int | None = None  # None: as wide as the value; -1: the widest value (`%#P`)
    right: bool = False
    text: str = ""


def parse_format(text: str, letters: Iterable[str]) -> list[Field]:
    """Slurm's format string: `%.18i %.9P %j`; `%%` is a percent sign. A letter not in
    `letters` is a ValueError naming it."""
    known = set(letters)
    fields: list[Field] = []
    literal = ""
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "%":
            literal += ch
            continue
        if i < len(text) and text[i] == "%":
            literal += "%"
            i += 1
            continue
        right = i < len(text) and text[i] == "."
        i += right
        width_text = ""
        while i < len(text) and (text[i].isdigit() or text[i] == "#"):
            width_text += text[i]
            i += 1
        if i >= len(text):
            raise ValueError("a format ends in the middle of a % field")
        letter = text[i]
        i += 1
        if letter not in known:
            raise ValueError(f"%{letter} is not a field XCE knows")
        if literal:
            fields.append(Field("", text=literal))
            literal = ""
        width = -1 if width_text == "#" else (int(width_text) if width_text.isdigit() else None)
        fields.append(Field(letter, width, right))
    if literal:
        fields.append(Field("", text=literal))
    return fields


def render_format(
    fields: Sequence[Field],
    headers: Mapping[str, str],
    rows: Sequence[Mapping[str, str]],
    header: bool = True,
) -> list[str]:
    """The lines of a `%` format: values cut to their field's width (as squeue does),
    `.` right-justified, `#` as wide as the widest value."""
    widths: dict[int, int | None] = {}
    for n, f in enumerate(fields):
        if f.width == -1:
            widths[n] = max([len(headers[f.letter]), *(len(r[f.letter]) for r in rows)])
        else:
            widths[n] = f.width

    def line(values: Mapping[str, str]) -> str:
        out = []
        for n, f in enumerate(fields):
            if not f.letter:
                out.append(f.text)
                continue
            value, width = values[f.letter], widths[n]
            if width:
                value = value[:width]
                value = value.rjust(width) if f.right else value.ljust(width)
            out.append(value)
        return "".join(out)

    return ([line(headers)] if header else []) + [line(row) for row in rows]


@dataclass(frozen=True)
class Column:
    """A column of a fixed-layout table (bjobs, qstat, sacct...): at least `width` wide."""

    title: str
    width: int = 0
    right: bool = False


def render_columns(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    header: bool = True,
    sep: str = " ",
    rule: bool = False,
    cut: str | None = None,
) -> list[str]:
    """Aligned lines: each column as wide as its widest value (or its `width`), the last
    one unpadded; `rule` adds a line of dashes under the titles (qstat, sacct); with `cut`
    (sacct's `+`) every column keeps its width and a longer value is cut and marked, as
    sacct does (a title is cut unmarked)."""
    widths = []
    for n, c in enumerate(columns):
        if cut is not None and c.width:
            widths.append(c.width)
        else:
            widths.append(max([c.width, len(c.title) if header else 0, *(len(r[n]) for r in rows)]))

    def fit(value: str, n: int, mark: str | None = cut) -> str:
        c, width = columns[n], widths[n]
        if cut is not None and len(value) > width:
            value = value[: width - len(mark or "")] + (mark or "")
        if n == len(columns) - 1 and not c.right and cut is None:
            return value
        return value.rjust(width) if c.right else value.ljust(width)

    lines = []
    if header:
        lines.append(sep.join(fit(c.title, n, "") for n, c in enumerate(columns)))
        if rule:
            lines.append(sep.join("-" * w for w in widths))
    lines += [sep.join(fit(v, n) for n, v in enumerate(r)) for r in rows]
    return lines
