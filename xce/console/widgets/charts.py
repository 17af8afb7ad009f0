"""The cluster's shape over the last hour or day: running, pending, slot use, GPUs in use,
submitted and finished per step, each a Textual `Sparkline` under a one-line label.

The samples are the controller's history ring (`GET /api/v1/cluster/history`,
xce/controller/cluster_history.py); the gauges get one more point, the figures now, taken
from the listings the event stream keeps current, so the charts move between two reads of
the history. A sparkline is one line of block characters per chart, which keeps the screen
readable at 80x24 and cheap to repaint over a slow SSH link. No clock text is drawn (the
label says how far back the chart goes), so a chart depends on the samples alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.widget import Widget
from textual.widgets import Sparkline, Static

# Window name -> (minutes asked for, the step to aggregate to, seconds; None: the ring's).
# A day at the ring's step would be 1,440 points for a chart some 40 cells wide.
WINDOWS: dict[str, tuple[int, int | None]] = {"hour": (60, None), "day": (1440, 600)}
HISTORY = "/api/v1/cluster/history"

# (id, label) in the grid's order: two columns, row by row.
CHARTS = (
    ("running", "running"),
    ("slots", "slots in use"),
    ("pending", "pending"),
    ("gpus", "GPUs in use"),
    ("submitted", "submitted"),
    ("finished", "finished"),
)
_LIVE = ("running", "pending", "slots_busy", "slots_total", "gpus_busy", "gpus_total")


def history_path(window: str, ring_step: int | None) -> str:
    """The history request for `window`; a coarser step only once the ring's is known (it
    must be a multiple of it)."""
    minutes, coarse = WINDOWS[window]
    path = f"{HISTORY}?minutes={minutes}"
    if coarse is not None and ring_step:
        path += f"&step={ring_step * max(1, coarse // ring_step)}"
    return path


def live_point(queues: Iterable[dict[str, Any]], hosts: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The gauges now, from the listings the stream keeps current (the queues' job counts,
    the hosts' slots and devices): the same figures a history sample holds."""
    running = pending = 0
    for q in queues:
        running += int(q.get("running") or 0) + int(q.get("suspended") or 0)
        pending += int(q.get("pending") or 0)
    slots_busy = slots_total = gpus_busy = gpus_total = 0
    for h in hosts:
        slots_busy += int(h.get("slots_used") or 0)
        if h.get("status") == "online":
            slots_total += int(h.get("slots") or 0)
        gpu = (h.get("gres") or {}).get("gpu")
        if gpu:
            gpus_busy += int(gpu.get("total", 0)) - int(gpu.get("free", 0))
            if h.get("status") == "online":
                gpus_total += int(gpu.get("total", 0))
    return {
        "running": running,
        "pending": pending,
        "slots_busy": slots_busy,
        "slots_total": slots_total,
        "gpus_busy": gpus_busy,
        "gpus_total": gpus_total,
    }


def _percent(busy: float, total: float) -> float:
    return 100.0 * busy / total if total else 0.0


def chart_series(
    samples: Sequence[dict[str, Any]], live: dict[str, int] | None = None
) -> dict[str, list[float]]:
    """Each chart's points, oldest first; the gauges end with `live` when given."""
    points = list(samples)
    gauges = [*points, live] if live is not None else points
    return {
        "running": [float(s["running"]) for s in gauges],
        "pending": [float(s["pending"]) for s in gauges],
        "slots": [_percent(s["slots_busy"], s["slots_total"]) for s in gauges],
        "gpus": [float(s["gpus_busy"]) for s in gauges],
        "submitted": [float(s["submitted"]) for s in points],
        "finished": [float(s["finished"]) for s in points],
    }


def _span(seconds: int) -> str:
    if seconds % 3600 == 0 and seconds >= 3600:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def chart_labels(
    series: dict[str, list[float]], step_s: int, now: dict[str, int] | None
) -> dict[str, str]:
    """One line per chart: its name, the figure now and the peak of the window."""

    def peak(name: str) -> float:
        return max(series[name], default=0.0)

    last = now or {}
    gpus_total = last.get("gpus_total", 0)
    per = f"per {_span(step_s)}"
    run_now = last.get("running", int(series["running"][-1]) if series["running"] else 0)
    pend_now = last.get("pending", int(series["pending"][-1]) if series["pending"] else 0)
    slots_now = series["slots"][-1] if series["slots"] else 0.0
    gpus_now = int(series["gpus"][-1]) if series["gpus"] else 0
    return {
        "running": f"running    now {run_now:<6} peak {peak('running'):.0f}",
        "pending": f"pending    now {pend_now:<6} peak {peak('pending'):.0f}",
        "slots": f"slots in use  now {slots_now:.0f}%  peak {peak('slots'):.0f}%",
        "gpus": f"GPUs in use   now {gpus_now}/{gpus_total}  peak {peak('gpus'):.0f}",
        "submitted": f"submitted {per}  peak {peak('submitted'):.0f}",
        "finished": f"finished {per}  peak {peak('finished'):.0f}",
    }


class HistoryCharts(Widget):
    """The title line and the six charts; `show` repaints them from one history answer."""

    DEFAULT_CSS = """
    HistoryCharts { height: auto; padding: 0 1; }
    HistoryCharts #charts-title { height: 1; color: $text-muted; }
    HistoryCharts Grid { grid-size: 2; grid-gutter: 0 2; height: auto; grid-rows: 2; }
    HistoryCharts .chart { height: 2; }
    HistoryCharts .chart-label { height: 1; }
    HistoryCharts Sparkline { height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="charts-title", markup=False)
        with Grid():
            for name, _ in CHARTS:
                with Vertical(classes="chart", id=f"chart-{name}"):
                    yield Static(classes="chart-label", id=f"label-{name}", markup=False)
                    yield Sparkline([], id=f"spark-{name}")

    def show(self, history: dict[str, Any], window: str, live: dict[str, int] | None) -> None:
        samples = history.get("samples") or []
        step_s = int(history.get("step_s") or 60)
        series = chart_series(samples, live)
        labels = chart_labels(series, step_s, live)
        key = "d: last 24 h" if window == "hour" else "h: last hour"
        span = "last hour" if window == "hour" else "last 24 h"
        self.query_one("#charts-title", Static).update(
            f"Cluster, {span}: {len(samples)} samples of {_span(step_s)}   ({key})"
        )
        for name, _ in CHARTS:
            self.query_one(f"#label-{name}", Static).update(labels[name])
            spark = self.query_one(f"#spark-{name}", Sparkline)
            if spark.data != series[name]:
                spark.data = series[name]
