"""A job's CPU and memory over its attempt: two `Sparkline`s for the job detail, from
`GET /api/v1/jobs/{id}/usage` (xce/controller/usage_series.py: the usage the worker already
reports, a bounded series per running job).

The series holds CPU seconds used so far and the memory peak so far at each point, so the
CPU chart draws the rate between two points (cores busy: 2.0 is two cores' worth) and the
memory chart the peak as it grew. The points come at the workers' report interval, thinned
evenly once a job has many; the rate between two points is the mean over the time between
them, whatever that time is.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any
from urllib.parse import quote

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from xce.console import fmt


def usage_path(job_id: str) -> str:
    return f"/api/v1/jobs/{quote(job_id, safe='')}/usage"


def cpu_rates(points: Sequence[dict[str, float]]) -> list[float]:
    """Cores busy between each two points (CPU seconds over wall seconds); a point that
    does not move forward in time is skipped."""
    rates: list[float] = []
    for before, after in pairwise(points):
        wall = after["t"] - before["t"]
        if wall > 0:
            rates.append(max(after["cpu_s"] - before["cpu_s"], 0.0) / wall)
    return rates


def usage_labels(points: Sequence[dict[str, float]], kept: bool) -> tuple[str, str]:
    """The two charts' lines: CPU now and peak in cores, memory peak now."""
    if not kept or not points:
        why = "no usage series for this attempt" if not kept else "no usage reported yet"
        return (f"CPU     {why}", "memory")
    rates = cpu_rates(points)
    now = rates[-1] if rates else 0.0
    peak = max(rates, default=0.0)
    rss = points[-1]["rss_bytes"]
    return (
        f"CPU     now {now:.2f} cores  peak {peak:.2f}  total {fmt.duration(points[-1]['cpu_s'])}",
        f"memory  peak {fmt.size(rss)}",
    )


class JobUsageChart(Widget):
    """CPU (cores busy) and memory peak over the attempt; `show` takes one usage answer."""

    DEFAULT_CSS = """
    JobUsageChart { height: auto; padding: 0 1; }
    JobUsageChart .usage-label { height: 1; }
    JobUsageChart Sparkline { height: 1; }
    """

    def compose(self) -> ComposeResult:
        cpu_label, mem_label = usage_labels([], kept=True)
        yield Static(cpu_label, classes="usage-label", id="usage-cpu-label", markup=False)
        yield Sparkline([], id="usage-cpu")
        yield Static(mem_label, classes="usage-label", id="usage-mem-label", markup=False)
        yield Sparkline([], id="usage-mem")

    def show(self, answer: dict[str, Any]) -> None:
        points = answer.get("points") or []
        cpu_label, mem_label = usage_labels(points, bool(answer.get("kept")))
        self.query_one("#usage-cpu-label", Static).update(cpu_label)
        self.query_one("#usage-mem-label", Static).update(mem_label)
        self.query_one("#usage-cpu", Sparkline).data = cpu_rates(points)
        self.query_one("#usage-mem", Sparkline).data = [float(p["rss_bytes"]) for p in points]
