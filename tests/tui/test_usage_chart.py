"""The job detail's usage chart: CPU rate between the reported points and the memory peak,
drawn from one `GET /api/v1/jobs/{id}/usage` answer (the widget on its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Sparkline, Static

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from tests.tui.helpers import screen_text, until
from xce.console.app import XceTui
from xce.console.screens.job_detail import JobDetailScreen
from xce.console.widgets.usage_chart import JobUsageChart, cpu_rates, usage_labels, usage_path

POINTS = [
    {"t": 1000.0, "cpu_s": 0.0, "rss_bytes": 0.0},
    {"t": 1030.0, "cpu_s": 60.0, "rss_bytes": 2.0 * 2**30},
    {"t": 1060.0, "cpu_s": 90.0, "rss_bytes": 3.0 * 2**30},
    {"t": 1060.0, "cpu_s": 95.0, "rss_bytes": 3.0 * 2**30},  # no time passed: skipped
]


def test_rates_are_cores_busy_between_points() -> None:
    assert cpu_rates(POINTS) == [2.0, 1.0]
    assert cpu_rates(POINTS[:1]) == []


def test_labels_say_now_peak_and_why_nothing_is_drawn() -> None:
    cpu, mem = usage_labels(POINTS, kept=True)
    assert "now 1.00 cores" in cpu and "peak 2.00" in cpu and "3.0G" in mem
    assert "no usage series" in usage_labels([], kept=False)[0]
    assert "no usage reported yet" in usage_labels([], kept=True)[0]
    assert usage_path("7[3]") == "/api/v1/jobs/7%5B3%5D/usage"


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield JobUsageChart()


async def test_the_widget_draws_one_answer() -> None:
    app = _One()
    async with app.run_test(size=(60, 8)) as pilot:
        chart = app.query_one(JobUsageChart)
        answer: dict[str, Any] = {"points": POINTS, "kept": True}
        chart.show(answer)
        await pilot.pause()
        assert app.query_one("#usage-cpu", Sparkline).data == [2.0, 1.0]
        assert len(app.query_one("#usage-mem", Sparkline).data or []) == 4
        label = app.query_one("#usage-cpu-label", Static)
        assert "now 1.00 cores" in str(label.render())


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


async def test_the_job_detail_draws_a_running_jobs_usage(one_worker: Cluster) -> None:
    """A real worker reports a busy job's usage; the detail's chart fetches the series and
    shows the CPU rate and memory peak (the worker's usage is logged every 30 s and the
    chart refetches every 15 s: the test asks once more itself when the series has points)."""
    job_id = one_worker.submit(command="while :; do :; done", name="spin")
    one_worker.wait_state(job_id, "RUN", timeout=30)
    usage = f"/api/v1/jobs/{job_id}/usage"
    one_worker.wait_for(lambda: len(one_worker.get(usage)["points"]) >= 2, 60, "usage points")
    app = XceTui([one_worker.url], ADMIN_TOKEN)
    async with app.run_test(size=(110, 40)) as pilot:
        screen = JobDetailScreen(job_id)
        app.push_screen(screen)
        await until(pilot, lambda: "spin" in screen_text(pilot), "the detail", 15)
        screen.poll_usage()
        label = lambda: str(screen.query_one("#usage-cpu-label", Static).render())  # noqa: E731
        await until(pilot, lambda: "now " in label(), "the usage chart", 15)
        assert "cores" in label() and len(screen.query_one("#usage-cpu", Sparkline).data or []) >= 1
    one_worker.post(f"/api/v1/jobs/{job_id}/kill", {})
