"""A job pending across controller restarts keeps its eligible time, so accounting counts
its whole wait: through a kill -9 (WAL replay), a clean stop (checkpoint) and its start."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.cluster import Cluster


def test_a_pending_job_keeps_its_eligible_time_across_restarts(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "c")
    c.start_controller()
    try:
        job_id = c.submit(command="true", name="waits")
        before = c.job(job_id)
        assert before["state"] == "PEND" and before["eligible_time"] is not None
        eligible = before["eligible_time"]

        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)  # replayed from the WAL
        c.controller.wait(10)
        c.start_controller()
        assert c.job(job_id)["eligible_time"] == eligible

        c.controller.terminate()  # a clean stop writes a checkpoint: read from it
        c.controller.wait(20)
        c.start_controller()
        assert c.job(job_id)["eligible_time"] == eligible

        c.start_worker("w1")
        started = c.wait_state(job_id, "RUN", "DONE")
        assert started["eligible_time"] == eligible
        assert started["start_time"] > eligible
    finally:
        c.stop()
