"""The job detail's tail pane against a real controller and worker: output appears while
the job runs, new bytes are appended once, and stderr is one key away."""

from __future__ import annotations

from textual.widgets import Log

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from tests.tui.helpers import screen_text, until
from xce.console.app import XceTui
from xce.console.screens.job_detail import JobDetailScreen


def _log_text(app: XceTui) -> str:
    """The tail pane's lines ("" until the detail screen has composed it)."""
    found = app.screen.query("#tail")
    return "\n".join(found.first(Log).lines) if found else ""


async def test_tail_pane_follows_a_running_job(cluster: Cluster) -> None:
    job_id = cluster.submit(
        command="echo tail-one; echo err-one >&2; sleep 8; echo tail-two; sleep 1", name="tailjob"
    )
    cluster.wait_state(job_id, "RUN")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: job_id in app.jobs.rows, "the job listed")
        app.push_screen(JobDetailScreen(job_id))
        # (the command itself, shown in the detail, also says tail-one: read the pane)
        await until(pilot, lambda: "tail-one" in _log_text(app), "the first line", 15)
        assert cluster.job(job_id)["state"] == "RUN"  # seen while the job still runs
        assert "tail-two" not in _log_text(app)
        await until(pilot, lambda: "stdout: live" in screen_text(pilot), "the live title")
        await until(pilot, lambda: "tail-two" in _log_text(app), "the second line", 15)
        assert _log_text(app).count("tail-one") == 1  # only new bytes were appended
        await until(
            pilot,
            lambda: "the file the job left" in screen_text(pilot),
            "the finished job's file",
            15,
        )
        assert _log_text(app).splitlines()[:2] == ["tail-one", "tail-two"]
        await pilot.press("o")
        await until(pilot, lambda: "err-one" in _log_text(app), "stderr in the pane")
        assert "tail-one" not in _log_text(app)
        await until(
            pilot, lambda: "stderr: the file the job left" in screen_text(pilot), "the stderr title"
        )
