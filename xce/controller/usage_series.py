"""A running job's CPU and memory over its life, for the console's job detail
(`GET /api/v1/jobs/{job_id}/usage`).

The points are the usage the workers already report: a job's `JobUsageReported` events (at
most every `USAGE_LOG_INTERVAL_S`, 30 s, per job, xce/controller/workers.py), its start
(nothing used yet) and its `JobFinished` (the final figures). Each point is the time, the
CPU seconds used so far (user + system) and the memory peak so far, as the worker measures
them (cgroup); the console draws the CPU rate between points and the peak.

Bounded, because a controller may run a hundred thousand jobs at once:
- at most `POINTS` points per job: when full, every other point goes (the first and the
  newest stay), so a long job keeps its whole life at a coarser step;
- three float32 per point in one array (12 bytes: times as offsets from the start, which
  float32 holds to the second for half a year);
- at most `MAX_JOBS` jobs: a job whose attempt ended keeps its series (the detail of a job
  that just ended still draws) until retention purges it or room is needed, oldest ended
  first; past that, new jobs get no series until room is made, and say so.

Memory only, like the output tails: after a restart or failover the series start again
from the next report (the reports are in the WAL, but only since the last checkpoint).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from xce.core import events as ev
from xce.core.state import ClusterState

POINTS = 64
MAX_JOBS = 20_000


@dataclass(slots=True)
class _Series:
    attempt: int
    start: float
    # t - start, cpu seconds, memory peak bytes: three float32 per point
    points: array[float] = field(default_factory=lambda: array("f"))

    def add(self, at: float, cpu_s: float, rss_bytes: int) -> None:
        points = self.points
        if len(points) >= 3 * POINTS:
            newest = points[-3:]
            # keep points 0, 2, 4, ... then the newest: the whole life at half the step
            thinned = array("f")
            for i in range(0, len(points) - 3, 6):
                thinned.extend(points[i : i + 3])
            thinned.extend(newest)
            self.points = points = thinned
        points.extend((at - self.start, cpu_s, float(rss_bytes)))

    def view(self) -> list[dict[str, float]]:
        p = self.points
        return [
            {"t": self.start + p[i], "cpu_s": p[i + 1], "rss_bytes": p[i + 2]}
            for i in range(0, len(p), 3)
        ]


class UsageSeries:
    """The series of the active jobs (and of those that ended lately), from applied events."""

    def __init__(self, state: ClusterState, max_jobs: int = MAX_JOBS) -> None:
        self.state = state
        self.max_jobs = max_jobs
        self.series: dict[str, _Series] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()  # series of ended attempts, oldest first
        self.refused = 0  # jobs that got no series because MAX_JOBS were kept

    def observe(self, event: ev.Event) -> None:
        """A committed-event listener (`ControllerService.listeners`)."""
        kind = type(event)
        if kind is ev.JobUsageReported:
            assert isinstance(event, ev.JobUsageReported)
            found = self.series.get(event.job_id)
            if found is not None and found.attempt == event.attempt:
                u = event.usage
                found.add(event.at, u.cpu_user_s + u.cpu_system_s, u.max_rss_bytes)
            return
        if kind is ev.JobStarted:
            assert isinstance(event, ev.JobStarted)
            job = self.state.jobs.get(event.job_id)
            if job is None:
                return
            if event.job_id not in self.series and not self._room():
                self.refused += 1
                return
            self.ended.pop(event.job_id, None)
            started = _Series(job.attempt, event.at)
            started.add(event.at, 0.0, 0)
            self.series[event.job_id] = started
            return
        if kind is ev.JobsPurged:
            assert isinstance(event, ev.JobsPurged)
            for purged in event.ids:
                self._forget(purged)
            return
        named = getattr(event, "job_id", None)
        if not isinstance(named, str) or named not in self.series:
            return
        job_id = named
        job = self.state.jobs.get(job_id)
        kept = self.series[job_id]
        if job is None:
            self._forget(job_id)
        elif job.state.active or job_id in self.ended:
            return
        elif job.attempt == kept.attempt:  # this attempt ended: its final figures
            if job.usage is not None and job.end_time is not None and job.state.finished:
                u = job.usage
                kept.add(job.end_time, u.cpu_user_s + u.cpu_system_s, u.max_rss_bytes)
            self.ended[job_id] = None
        else:  # requeued: the next attempt starts a series of its own
            self._forget(job_id)

    def _room(self) -> bool:
        while len(self.series) >= self.max_jobs and self.ended:
            oldest, _ = self.ended.popitem(last=False)
            self.series.pop(oldest, None)
        return len(self.series) < self.max_jobs

    def _forget(self, job_id: str) -> None:
        self.series.pop(job_id, None)
        self.ended.pop(job_id, None)

    def view(self, job_id: str, attempt: int) -> dict[str, Any]:
        """The points of `job_id`'s attempt `attempt` (none when not kept)."""
        found = self.series.get(job_id)
        kept = found is not None and found.attempt == attempt
        return {
            "points": found.view() if found is not None and kept else [],
            "kept": kept,
            "max_points": POINTS,
        }
