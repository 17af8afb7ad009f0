"""The console's job detail of a job that retention purged: the controller answers from
the accounting store and the detail says the job is archived (real controller and worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from tests.tui.helpers import screen_text, until
from xce.console.app import XceTui
from xce.console.screens.job_detail import JobDetailScreen


@pytest.fixture
def purging(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "finished_retention_s = 1\ncheckpoint_interval_s = 1"
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


async def test_detail_of_a_purged_job_comes_from_accounting(purging: Cluster) -> None:
    job_id = purging.submit(command="exit 3", name="gonejob")
    purging.wait_for(lambda: purging.job(job_id).get("archived") is True, 30, "purged")
    app = XceTui([purging.url], ADMIN_TOKEN)
    async with app.run_test(size=(110, 40)) as pilot:
        app.push_screen(JobDetailScreen(job_id))
        await until(pilot, lambda: "gonejob" in screen_text(pilot), "the archived detail", 15)
        text = screen_text(pilot)
        assert "(archived: from the accounting store)" in text and "exit_code    3" in text
        history = str(app.screen.query_one("#history", Static).render())  # below the fold
        assert "started        on w1 (attempt 0)" in history
        assert "finished       EXIT, exit code 3" in history
