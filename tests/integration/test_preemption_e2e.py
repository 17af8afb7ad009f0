"""Preemption with real processes: a controller and a worker on
loopback, real cgroups. A high-priority job takes the slots of a running low one; in
suspend mode the victim is frozen (its own clock shows the gap) and resumes when the slots
are free, in the same attempt; in requeue mode it is killed, queued again and runs anew."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.integration.cluster import Cluster

QUEUES = """
[[queue]]
name = "low"
priority = 10

[[queue]]
name = "high"
priority = 90
preempt = ["low"]
preempt_mode = "suspend"

[[queue]]
name = "urgent"
priority = 95
preempt = ["low"]
preempt_mode = "requeue"
"""
# 12 s of ticks: long enough to be still running when the preemptor comes on a loaded machine
TICKS = "for i in $(seq 1 60); do date +%s.%N; sleep 0.2; done"


def test_suspend_then_resume_and_requeue_then_run_again(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster", queues=QUEUES)
    try:
        c.start_controller()
        c.start_worker("w1", slots=2)
        # suspend mode: the victim is frozen while the preemptor runs, then goes on
        low = c.submit(command=TICKS, queue="low", slots=2)
        c.wait_state(low, "RUN")
        high = c.submit(command="sleep 3", queue="high", slots=2)
        shown = c.wait_state(low, "SSUSP", timeout=60)
        assert shown["reason"] == f"preempted by job {high}", shown
        c.wait_state(high, "RUN", timeout=60)
        assert c.wait_state(high, "DONE", timeout=60)["exit_code"] == 0
        done = c.wait_state(low, "DONE", timeout=90)
        assert done["attempt"] == 0  # the same attempt went on: suspended, not restarted
        ticks = [float(t) for t in c.download(low, "stdout").decode().split()]
        assert len(ticks) == 60
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        assert max(gaps) >= 2.5, gaps  # frozen for about the 3 s the preemptor ran
        # requeue mode: the victim is killed, queued again, and runs once the slots free
        again = c.submit(command="sleep 2; echo finished", queue="low", slots=1)
        c.wait_state(again, "RUN")
        other = c.submit(command="sleep 60", queue="low", slots=1)
        c.wait_state(other, "RUN")
        urgent = c.submit(command="sleep 1", queue="urgent", slots=1)
        c.wait_state(urgent, "DONE", timeout=90)
        requeued = [j for j in (again, other) if c.job(j)["attempt"] == 1]
        assert len(requeued) == 1, [c.job(j) for j in (again, other)]  # one victim only
        victim = requeued[0]
        assert victim == other  # the most recently started one
        c.wait_state(other, "RUN", timeout=60)
        assert c.wait_state(again, "DONE", timeout=60)["attempt"] == 0
        c.control(other, "kill")
        c.wait_state(other, "EXIT", timeout=60)
    finally:
        c.stop()
