"""The simulator's outcome per job and its metrics, as papers on the Parallel Workloads
Archive give them (see xce/sched/sim/simulate.py), with the per-job CSV.
"""

from __future__ import annotations

import csv
import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from xce.sched.sim.inputs import executed_time
from xce.sched.sim.swf import SwfJob

TAU_S = 10.0
# run-time classes of `detail_by_run_time`: (label, upper bound in seconds, exclusive)
RUN_CLASSES: tuple[tuple[str, float], ...] = (
    ("< 1 min", 60.0),
    ("1-10 min", 600.0),
    ("10-60 min", 3600.0),
    ("1-4 h", 14400.0),
    ("4-12 h", 43200.0),
)
LONGEST = ">= 12 h"
SERIES_POINTS = 500  # the most samples `SimResult.series` gives, whatever the trace's span


@dataclass(slots=True)
class Outcome:
    job: SwfJob
    job_id: str
    host: str = ""
    start: float | None = None
    end: float | None = None

    @property
    def wait(self) -> float:
        """Start - submit, of a job that started."""
        if self.start is None:
            raise ValueError(f"job {self.job.number} has not started")
        return self.start - self.job.submit

    @property
    def killed(self) -> bool:
        return self.job.requested_time is not None and self.job.run_time > self.job.requested_time


@dataclass(frozen=True, slots=True)
class Series:
    """A replay's queue and use sampled every `step_s` of virtual time from the first
    submit: `times[k]` (seconds after it), the jobs waiting then and the fraction of the
    cluster's slots busy then, each after everything that happened at that instant (ends,
    arrivals, starts). What `xce simulate --chart` draws."""

    step_s: float
    times: list[float]
    queued: list[int]
    utilisation: list[float]


@dataclass
class SimResult:
    policy: str
    plugins: tuple[str, ...]
    hosts: int
    slots: int
    outcomes: list[Outcome]
    skipped: int
    passes: int = 0
    seconds: float = 0.0

    @property
    def decisions(self) -> list[tuple[float, int, str]]:
        """(time, trace job number, host) of every start, by time, then by job number."""
        return sorted((o.start, o.job.number, o.host) for o in self.outcomes if o.start is not None)

    def done(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.start is not None and o.end is not None]

    def metrics(self) -> dict[str, Any]:
        done = self.done()
        n = len(done)
        waits = [o.wait for o in done]
        bsld = [bounded_slowdown(w, o) for w, o in zip(waits, done, strict=True)]
        first = min((o.job.submit for o in done), default=0.0)
        last = max((o.end for o in done if o.end is not None), default=0.0)
        makespan = last - first
        busy = sum(o.job.procs * executed_time(o.job) for o in done)
        capacity = self.hosts * self.slots * makespan
        return {
            "policy": self.policy,
            "plugins": list(self.plugins),
            "hosts": self.hosts,
            "slots_per_host": self.slots,
            "jobs": n,
            "skipped": self.skipped,
            "killed": sum(1 for o in done if o.killed),
            "avg_wait_s": sum(waits) / n if n else 0.0,
            "median_wait_s": statistics.median(waits) if n else 0.0,
            "avg_bounded_slowdown": sum(bsld) / n if n else 0.0,
            "utilisation": busy / capacity if capacity else 0.0,
            "makespan_s": makespan,
            "passes": self.passes,
            "sim_seconds": self.seconds,
            "jobs_per_s": n / self.seconds if self.seconds else 0.0,
        }

    def series(self, max_points: int = SERIES_POINTS) -> Series:
        """The queue length and utilisation over virtual time, at most `max_points` samples
        (at least 2) at a fixed step of whole seconds (1 s, or the span from the first
        submit to the last end over `max_points - 1`, rounded up): a chart's worth for any
        trace. Computed from the outcomes after the replay, so the replay's loop pays
        nothing for it: O(jobs log jobs + samples log jobs)."""
        if max_points < 2:
            raise ValueError("a series needs at least 2 points")
        done = self.done()
        if not done:
            return Series(1.0, [], [], [])
        first = min(o.job.submit for o in done)
        span = max(o.end for o in done if o.end is not None) - first
        step = max(1.0, float(math.ceil(span / (max_points - 1))))
        submits = sorted(o.job.submit for o in done)
        starts = sorted((o.start, o.job.procs) for o in done if o.start is not None)
        ends = sorted((o.end, o.job.procs) for o in done if o.end is not None)
        start_at = [t for t, _ in starts]
        end_at = [t for t, _ in ends]
        # slots taken by the jobs started (ended) up to each one, in time order
        taken = [0, *accumulate(p for _, p in starts)]
        freed = [0, *accumulate(p for _, p in ends)]
        capacity = self.hosts * self.slots
        times, queued, used = [], [], []
        for k in range(int(span // step) + 1):
            t = first + k * step
            began = bisect_right(start_at, t)
            busy = taken[began] - freed[bisect_right(end_at, t)]
            times.append(k * step)
            queued.append(bisect_right(submits, t) - began)
            used.append(busy / capacity if capacity else 0.0)
        return Series(step, times, queued, used)

    def detail(self) -> list[dict[str, Any]]:
        """Wait and slowdown per job-size class (1, 2, 3-4, 5-8, ... slots)."""
        classes: dict[int, list[Outcome]] = {}
        for o in self.done():
            classes.setdefault((o.job.procs - 1).bit_length(), []).append(o)
        rows = []
        for bits in sorted(classes):
            low, high = (1 << (bits - 1)) + 1 if bits else 1, 1 << bits
            rows.append(
                _class_row("size", str(high) if low == high else f"{low}-{high}", classes[bits])
            )
        return rows

    def detail_by_run_time(self) -> list[dict[str, Any]]:
        """Wait and slowdown per run-time class (what the job ran, cut at its request):
        a policy that favours short jobs shows here who gains and who pays."""
        classes: dict[int, list[Outcome]] = {}
        for o in self.done():
            ran = executed_time(o.job)
            at = next((k for k, (_, top) in enumerate(RUN_CLASSES) if ran < top), len(RUN_CLASSES))
            classes.setdefault(at, []).append(o)
        return [
            _class_row("run_time", RUN_CLASSES[k][0] if k < len(RUN_CLASSES) else LONGEST, members)
            for k, members in sorted(classes.items())
        ]

    def write_csv(self, handle: Any, header: bool = True) -> None:
        """One row per job that ran: what a site plots (start times, waits, hosts)."""
        out = csv.writer(handle)
        if header:
            out.writerow(
                (
                    "policy",
                    "job",
                    "user",
                    "procs",
                    "submit",
                    "start",
                    "end",
                    "wait",
                    "host",
                    "killed",
                )
            )
        for o in self.outcomes:
            if o.start is None:
                continue
            out.writerow(
                (
                    self.policy,
                    o.job.number,
                    o.job.user,
                    o.job.procs,
                    _num(o.job.submit),
                    _num(o.start),
                    _num(o.end),
                    _num(o.start - o.job.submit),
                    o.host,
                    int(o.killed),
                )
            )


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def _class_row(key: str, label: str, members: list[Outcome]) -> dict[str, Any]:
    """One row of a breakdown: how many jobs, their average, median and maximum wait and
    average bounded slowdown."""
    waits = [o.wait for o in members]
    return {
        key: label,
        "jobs": len(members),
        "avg_wait_s": sum(waits) / len(waits),
        "median_wait_s": statistics.median(waits),
        "max_wait_s": max(waits),
        "avg_bounded_slowdown": sum(
            bounded_slowdown(w, o) for w, o in zip(waits, members, strict=True)
        )
        / len(members),
    }


def bounded_slowdown(wait: float, outcome: Outcome) -> float:
    ran = executed_time(outcome.job)
    return max(1.0, (wait + ran) / max(ran, TAU_S))
