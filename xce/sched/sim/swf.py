"""Standard Workload Format (SWF, Feitelson's Parallel Workloads Archive) traces.

One job per line, 18 whitespace-separated fields, `-1` for unknown; lines starting with `;`
are header comments (`; MaxProcs: 128`). A `.gz` file is read through gzip. Fields used:
1 job number, 2 submit time, 4 run time, 5 allocated and 8 requested processors, 9
requested time, 12 user id, 13 group id.

The reader's choices follow the usual conventions of published results on the archive
(`CHOICES`, also printed by `xce simulate --help`): a job with no requested time uses its
run time as its estimate (perfect estimates), or none at all with `no_estimate="infinite"`;
a job whose requested processors are missing uses its allocated ones; records without a run
time, a processor count or a submit time are skipped (and counted); the machine's size is
the `MaxProcs` header, else `MaxNodes`.
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FIELDS = 18
NO_ESTIMATE = ("runtime", "infinite")
CHOICES = (
    "requested time -1: the run time is the estimate (--no-estimate=runtime, the default; "
    "'infinite' keeps no limit, so EASY cannot reserve behind such jobs)",
    "requested processors -1: the allocated processors",
    "run time, processors or submit time missing: the record is skipped and counted",
    "machine size: the MaxProcs header, else MaxNodes, else the widest job",
    "a job runs for its run time, cut at its requested time (killed as a real cluster would)",
    "GPUs: an optional 19th field (XCE's, not SWF's) is the job's GPUs on its host, or "
    "--gpus-per-job for every job; hosts get --gpus-per-host",
    "a job wider than one host is packed on ceil(procs / slots) hosts; only a job wider "
    "than the whole machine is skipped and counted",
)


class SwfError(ValueError):
    """A line that is not an SWF job record; the message names the line."""


@dataclass(frozen=True, slots=True)
class SwfJob:
    number: int
    submit: float
    run_time: float
    procs: int
    requested_time: int | None  # walltime limit, seconds; None when the trace has none
    user: str
    group: str
    gpus: int = 0  # GPUs per job: XCE's optional 19th field (SWF has none)

    def to_line(self) -> str:
        fields: list[float] = [-1] * FIELDS
        fields[0], fields[1], fields[3] = self.number, self.submit, self.run_time
        fields[4] = fields[7] = self.procs
        fields[8] = -1 if self.requested_time is None else self.requested_time
        fields[10] = 1
        fields[11] = int(self.user.lstrip("u") or 0)
        fields[12] = int(self.group.lstrip("g") or 0)
        if self.gpus:
            fields.append(self.gpus)
        return " ".join(_number(f) for f in fields)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


@dataclass
class Trace:
    jobs: list[SwfJob]
    header: dict[str, str]
    skipped: int  # records without a usable run time or processor count

    @property
    def max_procs(self) -> int | None:
        for key in ("MaxProcs", "MaxNodes"):
            value = self.header.get(key, "").split()
            if value and value[0].isdigit() and int(value[0]) > 0:
                return int(value[0])
        return None


def parse_swf(lines: Iterable[str], no_estimate: str = "runtime") -> Trace:
    """Jobs sorted by (submit, number); `no_estimate` says what a requested time of -1
    becomes: the job's run time ("runtime") or no limit ("infinite")."""
    if no_estimate not in NO_ESTIMATE:
        raise SwfError(f"no_estimate must be one of {', '.join(NO_ESTIMATE)}, got {no_estimate!r}")
    perfect = no_estimate == "runtime"
    jobs: list[SwfJob] = []
    header: dict[str, str] = {}
    skipped = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            key, sep, value = line[1:].partition(":")
            if sep:
                header.setdefault(key.strip(), value.strip())
            continue
        parts = line.split()
        if len(parts) not in (FIELDS, FIELDS + 1):
            raise SwfError(
                f"line {lineno}: expected {FIELDS} fields, found {len(parts)} "
                f"({FIELDS + 1}: the last is the job's GPUs)"
            )
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise SwfError(f"line {lineno}: fields must be numbers") from None
        if not all(math.isfinite(v) for v in values):
            raise SwfError(f"line {lineno}: fields must be finite numbers (no inf or nan)")
        run_time, requested = values[3], values[8]
        procs = int(values[7]) if values[7] > 0 else int(values[4])
        if run_time < 0 or procs <= 0 or values[1] < 0:
            skipped += 1
            continue
        if requested > 0:
            limit: int | None = max(1, int(requested))
        else:
            limit = max(1, math.ceil(run_time)) if perfect else None
        jobs.append(
            SwfJob(
                number=int(values[0]),
                submit=values[1],
                run_time=run_time,
                procs=procs,
                requested_time=limit,
                user=f"u{max(0, int(values[11]))}",
                group=f"g{max(0, int(values[12]))}",
                gpus=max(0, int(values[FIELDS])) if len(values) > FIELDS else 0,
            )
        )
    jobs.sort(key=lambda j: (j.submit, j.number))
    return Trace(jobs, header, skipped)


def read_swf(path: Path, no_estimate: str = "runtime") -> Trace:
    """Read a (possibly gzipped) SWF file; raises OSError or SwfError."""
    with path.open("rb") as raw:
        magic = raw.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rb") as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", errors="replace")
        return parse_swf(text, no_estimate)


def write_swf(jobs: Iterable[SwfJob], header: dict[str, str] | None = None) -> str:
    lines = [f"; {k}: {v}" for k, v in (header or {}).items()]
    lines.extend(job.to_line() for job in jobs)
    return "\n".join(lines) + "\n"
