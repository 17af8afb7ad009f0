"""Accounting in HA: a standby derives its own copy from the replicated events, so after a
failover the new primary answers the same records (and `job show` of a purged job)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.cluster import ADMIN_TOKEN
from tests.integration.ha_cluster import HaCluster

_SAME = (
    "job_id",
    "attempt",
    "user",
    "queue",
    "state",
    "exit_code",
    "host",
    "start_time",
    "end_time",
    "cpu_user_s",
    "cpu_system_s",
    "max_rss_bytes",
    "wall_s",
    "seq",
)


def _records(c: HaCluster) -> list[tuple]:
    jobs = c.get("/api/v1/accounting/jobs?limit=1000", token=ADMIN_TOKEN)["jobs"]
    return sorted(tuple(r[k] for k in _SAME) for r in jobs)


def test_the_new_primary_answers_the_same_records_after_a_failover(tmp_path: Path) -> None:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    c.extra_controller = "finished_retention_s = 1.0\ncheckpoint_interval_s = 1.0\n"
    try:
        c.start_pair()
        c.start_worker("w1", slots=4)
        ids = [c.submit(command=f"exit {i % 2}", name=f"j{i}") for i in range(6)]
        long = c.submit(command="sleep 30", name="requeued")
        c.wait_state(long, "RUN")
        c.control(long, "requeue")  # its first attempt ends REQUEUED
        c.wait_for(lambda: c.job(long)["attempt"] == 1, 30, "the requeue")
        c.control(long, "kill")
        for job in [*ids, long]:
            c.wait_state(job, "DONE", "EXIT")
        expected = len(ids) + 2
        c.wait_for(lambda: len(_records(c)) == expected, 30, "every attempt recorded")
        before = _records(c)
        assert sorted(r[1] for r in before if r[0] == long) == [0, 1]
        c.wait_for(lambda: c.job(ids[0]).get("archived") is True, 30, "purged by retention")
        c.wait_caught_up(1)
        c.kill_candidate(0)
        assert c.wait_primary(30, other_than=0) == 1
        c.wait_for(lambda: _records(c) == before, 30, "the same records on the new primary")
        shown = c.job(ids[1])
        assert shown["archived"] is True and shown["state"] == "EXIT"
    finally:
        c.stop()
