"""`xce job modify` with real processes: changes of a pending job
survive a controller killed with kill -9 (they are JobModified records in the WAL), and an
admin's new walltime for a running job reaches its worker, which enforces it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure, Cluster

QUEUES = """
[[queue]]
name = "short"
priority = 40
"""


def _patch(c: Cluster, job: str, body: dict) -> dict:
    return c.request("PATCH", f"/api/v1/jobs/{urllib.parse.quote(job, safe='')}", body)


def _cli(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(c.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_modify_survives_kill_9_and_a_new_walltime_reaches_the_worker(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster", queues=QUEUES)
    try:
        c.start_controller()
        c.start_worker("w1", slots=2)
        held = c.submit(command="true", hold=True, walltime_s=600)
        out = _cli(
            c,
            "job",
            "modify",
            held,
            "--priority",
            "70",
            "-J",
            "renamed",
            "-q",
            "short",
            "-W",
            "5",
            "-n",
            "2",
        )
        assert out.returncode == 0 and "are being changed" in out.stdout, out
        bad = _cli(c, "job", "modify", held, "-q", "nosuch")
        assert bad.returncode != 0 and bad.stderr.count("\n") == 1, bad
        assert "queue 'nosuch' does not exist" in bad.stderr
        waiter = c.submit(command="true", dependency=f"afterok:{held}", priority=30)
        table = _cli(c, "job", "priority")
        assert table.returncode == 0 and "FAIRSHARE_F" in table.stdout, table
        assert any(line.split()[0] == waiter for line in table.stdout.splitlines()[2:])
        rows = json.loads(_cli(c, "job", "priority", "--json").stdout)["jobs"]
        assert [r["job_priority"] for r in rows if r["job_id"] == waiter] == [30]
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
        changed = _cli(
            c,
            "queue",
            "modify",
            "short",
            "--preempt",
            "normal",
            "--preempt-mode",
            "requeue",
            "--preempt-min-run",
            "30",
        )
        assert changed.returncode == 0, changed
        listed = _cli(c, "queue", "list")
        assert "preempt=normal:requeue/30s" in listed.stdout, listed
        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)
        c.controller.wait(10)
        c.start_controller()
        shown = c.job(held)
        assert (
            shown["priority"],
            shown["name"],
            shown["queue"],
            shown["walltime_s"],
            shown["slots"],
            shown["state"],
        ) == (70, "renamed", "short", 300, 2, "PSUSP")
        assert c.job(running)["walltime_s"] == 2
        short = c.get("/api/v1/queues/short")
        assert (short["preempt"], short["preempt_mode"], short["preempt_min_run_s"]) == (
            ["normal"],
            "requeue",
            30,
        )
        assert _cli(c, "job", "modify", held, "--release").returncode == 0
        assert c.wait_state(held, "DONE", timeout=60)["exit_code"] == 0
        assert c.wait_state(waiter, "DONE", timeout=60)["exit_code"] == 0
    finally:
        c.stop()
