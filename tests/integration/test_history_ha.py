"""The cluster history across a restart and in HA: it is neither persisted nor replicated;
a restarted controller, like a promoted standby, rebuilds it from its own durable records
(the recovered state and the accounting store it derived), so after a kill -9 and a restart,
or after a failover, the controller answers the same figures for the steps before it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from tests.integration.ha_cluster import HaCluster

HISTORY = "/api/v1/cluster/history"
COMPARED = ("running", "pending", "slots_busy", "submitted", "finished")


def _figures(samples: list[dict[str, Any]]) -> dict[int, tuple[int, ...]]:
    return {s["t"]: tuple(s[f] for f in COMPARED) for s in samples}


def _same_past(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """Every step closed before the change (all but the last), from the first that saw
    anything, has the same figures after it."""
    old = _figures(before[:-1])
    new = _figures(after)
    first = min(t for t, f in old.items() if any(f))
    assert {t: f for t, f in old.items() if t >= first} == {
        t: new.get(t) for t in old if t >= first
    }


def test_a_restarted_controller_answers_the_same_past(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "history_step_s = 1\n"
    try:
        c.start_controller()
        c.start_worker("w1", slots=2)
        ids = [c.submit(command=f"sleep 1; exit {i % 2}") for i in range(3)]
        for job in ids:
            c.wait_state(job, "DONE", "EXIT")
        c.submit(command="true", hold=True)  # one that waits through the restart
        time.sleep(1.5)  # the step of the last change closes
        before = c.get(HISTORY, token=ADMIN_TOKEN)["samples"]
        assert sum(s["submitted"] for s in before) == 4
        assert sum(s["finished"] for s in before) == 3
        assert c.controller is not None
        c.controller.kill()  # kill -9: nothing written on the way out
        c.controller.wait(10)
        c.start_controller()
        c.wait_for(lambda: c.get(HISTORY, token=ADMIN_TOKEN)["rebuilt"], 30, "the history rebuilt")
        _same_past(before, c.get(HISTORY, token=ADMIN_TOKEN)["samples"])
    finally:
        c.stop()


def test_the_new_primary_answers_the_same_past_after_a_failover(tmp_path: Path) -> None:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    c.extra_controller = "history_step_s = 1\n"
    try:
        c.start_pair()
        c.start_worker("w1", slots=2)
        ids = [c.submit(command=f"sleep 1; exit {i % 2}") for i in range(4)]
        for job in ids:
            c.wait_state(job, "DONE", "EXIT")
        c.submit(command="true", hold=True)  # one that waits through the failover
        time.sleep(1.5)  # the step of the last change closes
        before = c.get(HISTORY, token=ADMIN_TOKEN)["samples"]
        assert sum(s["submitted"] for s in before) == 5
        assert sum(s["finished"] for s in before) == 4
        c.wait_caught_up(1)
        c.kill_candidate(0)
        assert c.wait_primary(30, other_than=0) == 1
        c.wait_for(lambda: c.get(HISTORY, token=ADMIN_TOKEN)["rebuilt"], 30, "the history rebuilt")
        _same_past(before, c.get(HISTORY, token=ADMIN_TOKEN)["samples"])
    finally:
        c.stop()
