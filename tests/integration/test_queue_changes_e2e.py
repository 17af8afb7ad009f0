"""Queues changed at run time survive a controller killed with kill -9:
the changes are events in the WAL; the config seeds queues only on the first start, so a
deleted queue the config still lists stays deleted."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.cluster import ApiFailure, Cluster


def test_queue_changes_and_deletes_survive_kill_9(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    try:
        c.start_controller()
        c.start_worker("w1", slots=4)
        c.post("/api/v1/queues", {"name": "gpu", "priority": 40, "users": ["root"]})
        c.request("PATCH", "/api/v1/queues/gpu", {"max_slots": 2, "default_walltime_s": 60})
        c.request("PATCH", "/api/v1/queues/normal", {"priority": 35, "max_walltime_s": 900})
        c.request("DELETE", "/api/v1/queues/fragile")  # listed in the config file
        job = c.submit(command="true", queue="gpu")
        assert c.wait_state(job, "DONE")["walltime_s"] == 60
        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)
        c.controller.wait(10)
        c.start_controller()
        queues = {q["name"]: q for q in c.get("/api/v1/queues")["queues"]}
        assert set(queues) == {"normal", "gpu"}, queues  # fragile stays deleted
        assert queues["gpu"]["max_slots"] == 2 and queues["gpu"]["users"] == ["root"]
        assert queues["normal"]["priority"] == 35 and queues["normal"]["max_walltime_s"] == 900
        try:
            c.submit(command="true", queue="gpu", slots=3)
            raise AssertionError("a job over the queue's max_slots was taken")
        except ApiFailure as exc:
            assert exc.status == 400 and "at most 2 per job" in str(exc.body)
        assert "config seeds queues only on the first start" in c.log_text()
    finally:
        c.stop()
