"""The cluster screen's charts: a fixed history drawn at 80x24 and 160x48 (snapshots), the
window key, and the pure parts (request, series, live point) on their own."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.tui.sample import NOW, hosts, queues, sample_app
from xce.console.widgets.charts import chart_labels, chart_series, history_path, live_point

STEP = 60


def fixed_history(samples: int = 60, step: int = STEP) -> dict[str, Any]:
    """An hour that has a shape: a queue that grows then drains, slots filling up, a burst
    of submissions; integers only, the same on every run."""
    end = int(NOW) // step * step
    rows = []
    for i in range(samples):
        wave = math.sin(i / 6.0)
        running = 10 + round(6 * wave) + i // 10
        rows.append(
            {
                "t": end - (samples - 1 - i) * step,
                "running": running,
                "pending": max(0, 30 - abs(30 - i)),
                "slots_busy": min(32, 2 * running),
                "slots_total": 32,
                "gpus_busy": (i // 15) % 3,
                "gpus_total": 4,
                "submitted": 12 if i in (20, 21) else i % 4,
                "finished": (i * 7) % 5,
            }
        )
    return {"step_s": step, "window_s": 86_400, "queue": None, "rebuilt": True, "samples": rows}


def test_the_request_asks_for_the_window_and_a_coarser_step_for_a_day() -> None:
    assert history_path("hour", None) == "/api/v1/cluster/history?minutes=60"
    assert history_path("hour", 60) == "/api/v1/cluster/history?minutes=60"
    assert history_path("day", None) == "/api/v1/cluster/history?minutes=1440"
    assert history_path("day", 60) == "/api/v1/cluster/history?minutes=1440&step=600"
    assert history_path("day", 7) == "/api/v1/cluster/history?minutes=1440&step=595"
    assert history_path("day", 3600) == "/api/v1/cluster/history?minutes=1440&step=3600"


def test_the_live_point_adds_up_the_listings_the_stream_keeps() -> None:
    now = live_point(queues().values(), hosts().values())
    # queues: short 0/0/0, normal 1 pending 1 suspended, long 8 pending 3 running
    assert (now["running"], now["pending"]) == (4, 9)
    # hosts: 3+1+0+2 slots used; the unavailable host's 8 slots are not offered
    assert (now["slots_busy"], now["slots_total"]) == (6, 24)
    gpu = [{"name": "g", "status": "online", "slots": 4, "slots_used": 0,
            "gres": {"gpu": {"free": 1, "total": 4}}}]  # fmt: skip
    assert live_point([], gpu)["gpus_busy"] == 3 and live_point([], gpu)["gpus_total"] == 4


def test_series_put_the_live_point_after_the_samples_for_gauges_only() -> None:
    samples = fixed_history(3)["samples"]
    live = {"running": 1, "pending": 2, "slots_busy": 8, "slots_total": 32}
    live |= {"gpus_busy": 0, "gpus_total": 4}
    series = chart_series(samples, live)
    assert len(series["running"]) == 4 and series["running"][-1] == 1.0
    assert series["slots"][-1] == 25.0
    assert len(series["submitted"]) == 3
    labels = chart_labels(series, 600, live)
    assert "now 1 " in labels["running"] and "per 10 min" in labels["submitted"]
    empty = chart_series([], None)
    assert all(v == [] for v in empty.values())
    assert "now 0" in chart_labels(empty, 60, None)["running"]


def _charts(*keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        screen = pilot.app.screen
        screen.show_history(fixed_history())
        await pilot.pause()
        await pilot.press(*keys)
        if screen.window == "day":  # what the controller answers for a day: 10 min steps
            screen.show_history(fixed_history(144, 600))
        await pilot.pause(0.4)  # one redraw tick

    return run


CASES = [("hour", (80, 24), ()), ("hour", (160, 48), ()), ("day", (80, 24), ("d",))]


@pytest.mark.parametrize(
    "window, size, keys", CASES, ids=[f"{w}-{x}x{y}" for w, (x, y), _ in CASES]
)
def test_cluster_charts_snapshot(
    window: str, size: tuple[int, int], keys: tuple[str, ...], snap_compare: Any
) -> None:
    assert snap_compare(sample_app(), terminal_size=size, run_before=_charts(*keys))


async def test_the_window_key_is_offered_only_with_charts_and_switches_back() -> None:
    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        screen = app.screen
        assert not screen.query_one("#charts").display
        assert not screen.check_action("window", ("day",))
        screen.show_history(fixed_history())
        await pilot.pause(0.4)
        assert screen.query_one("#charts").display
        assert screen.check_action("window", ("day",))
        assert not screen.check_action("window", ("hour",))
        await pilot.press("d")
        assert screen.window == "day" and screen.check_action("window", ("hour",))
        await pilot.press("h")
        assert screen.window == "hour"
