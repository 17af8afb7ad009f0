"""The history against a real controller and worker (one-second steps): the console's
cluster screen draws the charts from it, and a restarted controller answers the same
figures for the steps before the restart (rebuilt from its durable records)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from tests.tui.helpers import screen_text, until
from xce.console.app import XceTui
from xce.console.widgets.charts import HistoryCharts

HISTORY = "/api/v1/cluster/history"
COMPARED = ("running", "pending", "slots_busy", "submitted", "finished")


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "history_step_s = 1"
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


def _figures(samples: list[dict[str, Any]]) -> dict[int, tuple[int, ...]]:
    return {s["t"]: tuple(s[f] for f in COMPARED) for s in samples}


async def test_the_cluster_screen_draws_the_history(cluster: Cluster) -> None:
    job = cluster.submit(command="sleep 2", name="charted")
    cluster.wait_state(job, "DONE")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected")
        await pilot.press("4")
        charts = app.screen.query_one(HistoryCharts)
        await until(pilot, lambda: charts.display, "the charts shown")
        await until(pilot, lambda: "slots in use" in screen_text(pilot), "the charts drawn")
        text = screen_text(pilot)
        assert "last hour" in text and "d Last 24 h" in text
        await pilot.press("d")
        await until(pilot, lambda: "last 24 h" in screen_text(pilot), "the day drawn")


def test_a_restarted_controller_answers_the_same_past(cluster: Cluster) -> None:
    jobs = [cluster.submit(command="sleep 1") for _ in range(3)]
    for job in jobs:
        cluster.wait_state(job, "DONE")
    cluster.submit(command="true", hold=True)  # one that waits through the restart
    time.sleep(1.5)  # the step of the last change closes
    before = cluster.get(HISTORY)["samples"]
    assert sum(s["submitted"] for s in before) == 4
    assert sum(s["finished"] for s in before) == 3
    assert cluster.controller is not None
    cluster.controller.terminate()
    cluster.controller.wait(10)
    cluster.start_controller()
    cluster.wait_for(lambda: cluster.get(HISTORY)["rebuilt"], 20, "the history rebuilt")
    after = _figures(cluster.get(HISTORY)["samples"])
    # every step fully before the stop, where the first sample holds any activity on
    old = _figures(before[:-1])
    first = min(t for t, f in old.items() if any(f))
    assert {t: f for t, f in old.items() if t >= first} == {t: after[t] for t in old if t >= first}
