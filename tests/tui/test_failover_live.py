"""The console across a controller failover: a banner while no primary answers, then it
finds the new primary from the candidate list by itself and the live table carries on."""

from __future__ import annotations

from pathlib import Path

from tests.integration.cluster import ADMIN_TOKEN
from tests.integration.ha_cluster import HaCluster
from tests.tui.helpers import until
from xce.console.app import XceTui


async def test_console_follows_a_failover(tmp_path: Path) -> None:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0)
    try:
        c.start_pair()
        c.start_worker("w1")
        before = c.submit(command="true", hold=True, name="before-failover")
        app = XceTui(list(c.candidate_urls), ADMIN_TOKEN)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(
                pilot,
                lambda: before in app.jobs.rows and app.connection == "ok",
                "the job listed, connected",
            )
            c.kill_candidate(0)
            await until(
                pilot, lambda: app.connection != "ok", "the lost-connection banner", timeout=30
            )
            assert "reconnecting" in app.connection
            await until(pilot, lambda: app.connection == "ok", "reconnected", timeout=40)
            after = c.submit(command="true", hold=True, name="after-failover")
            await until(pilot, lambda: after in app.jobs.rows, "a new primary's job, live")
            assert app.client.base_url == c.candidate_urls[1]
    finally:
        c.stop()
