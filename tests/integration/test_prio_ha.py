"""Job modify and preemption across a failover: both are WAL records that the
standby replays, so the new primary shows the modified job, keeps the preempted victim
suspended and resumes it once the preemptor is gone."""

from __future__ import annotations

from pathlib import Path

from tests.integration.ha_cluster import HaCluster

QUEUES = """
[[queue]]
name = "low"
priority = 10

[[queue]]
name = "high"
priority = 90
preempt = ["low"]
"""


def test_modify_and_a_suspended_victim_survive_a_failover(tmp_path: Path) -> None:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    c.queues = QUEUES
    try:
        c.start_pair()
        c.start_worker("w1", slots=2)
        held = c.submit(command="true", hold=True)
        c.request(
            "PATCH", f"/api/v1/jobs/{held}", {"priority": 80, "name": "renamed", "queue": "low"}
        )
        low = c.submit(command="sleep 120", queue="low", slots=2)
        c.wait_state(low, "RUN", timeout=60)
        high = c.submit(command="sleep 120", queue="high", slots=2)
        c.wait_state(high, "RUN", timeout=60)
        assert c.job(low)["state"] == "SSUSP"
        c.wait_caught_up(1)
        c.kill_candidate(0)
        assert c.wait_primary(30, other_than=0) == 1
        shown = c.request("GET", f"/api/v1/jobs/{held}", retry_for=20)
        assert (shown["priority"], shown["name"], shown["queue"]) == (80, "renamed", "low")
        victim = c.job(low)
        assert victim["state"] == "SSUSP" and victim["preempted_by"] == high, victim
        c.request("POST", f"/api/v1/jobs/{high}/kill", {}, retry_for=20)
        c.wait_state(high, "EXIT", timeout=60)
        c.wait_state(low, "RUN", timeout=60)  # resumed by the new primary
        c.request("POST", f"/api/v1/jobs/{low}/kill", {}, retry_for=20)
        c.wait_state(low, "EXIT", timeout=60)
    finally:
        c.stop()
