"""`xce job modify` with real processes (issue 17, item 2): changes of a pending job
survive a controller killed with kill -9 (they are JobModified records in the WAL), and an
admin's new walltime for a running job reaches its worker, which enforces it."""

from __future__ import annotations

import signal
import urllib.parse
from pathlib import Path

from tests.integration.cluster import ApiFailure, Cluster

QUEUES = """
[[queue]]
name = "short"
priority = 40
"""


def _patch(c: Cluster, job: str, body: dict) -> dict:
    return c.request("PATCH", f"/api/v1/jobs/{urllib.parse.quote(job, safe='')}", body)


def test_modify_survives_kill_9_and_a_new_walltime_reaches_the_worker(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster", queues=QUEUES)
    try:
        c.start_controller()
        c.start_worker("w1", slots=2)
        held = c.submit(command="true", hold=True, walltime_s=600)
        _patch(c, held, {"priority": 70, "name": "renamed", "queue": "short",
                         "walltime_s": 300, "slots": 2})
        running = c.submit(command="sleep 120", walltime_s=600)
        c.wait_state(running, "RUN")
        _patch(c, running, {"walltime_s": 2})
        ended = c.wait_state(running, "EXIT", timeout=60)
        assert "walltime" in ended["reason"], ended
        try:
            _patch(c, running, {"name": "late"})
            raise AssertionError("a finished job was modified")
        except ApiFailure as exc:
            assert exc.status == 409
        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)
        c.controller.wait(10)
        c.start_controller()
        shown = c.job(held)
        assert (shown["priority"], shown["name"], shown["queue"], shown["walltime_s"],
                shown["slots"], shown["state"]) == (70, "renamed", "short", 300, 2, "PSUSP")
        assert c.job(running)["walltime_s"] == 2
        _patch(c, held, {"hold": False})
        assert c.wait_state(held, "DONE", timeout=60)["exit_code"] == 0
    finally:
        c.stop()
