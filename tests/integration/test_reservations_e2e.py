"""Advance reservations end to end: a real controller and worker on
loopback, driven by `xce rsv` and `xce job submit`. A maintenance window keeps a job with a
long walltime from starting while a short one runs; a job that targets a reservation runs
inside it (1 of the host's 2 slots: the other stays for everyone); both reservations and
their effect survive a controller killed with kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN, Cluster


def xce(c: Cluster, *args: str, token: str = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": token, "HOME": str(c.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_maintenance_and_user_reservations_with_a_restart(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    try:
        c.start_controller()
        c.start_worker("w1", slots=2)
        assert "is created" in ok(
            xce(c, "rsv", "add", "maint", "-m", "w1", "-b", "+300s", "-d", "1h", "--maintenance")
        )
        begin = time.time() + 4
        ok(
            xce(
                c,
                "rsv",
                "add",
                "team",
                "--hosts",
                "w1",
                "--start",
                f"{begin:.0f}",
                "--end",
                f"{begin + 200:.0f}",
                "--users",
                "root",
                "--slots",
                "1",
            )
        )
        long = c.submit(command="sleep 1", walltime_s=3600)
        short = c.submit(command="true", walltime_s=60)
        inside = json.loads(
            ok(xce(c, "job", "submit", "--json", "--user", "root", "-U", "team", "-W", "1", "true"))
        )["job_id"]
        assert c.wait_state(short, "DONE")["state"] == "DONE"
        c.wait_passes()
        pending = c.job(long)
        assert pending["state"] == "PEND", pending
        assert pending["reason"].startswith("reservation maint holds host w1 from "), pending
        done = c.wait_state(inside, "DONE", timeout=60)
        assert done["start_time"] >= begin - 0.5 and done["reservation"] == "team"

        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)
        c.controller.wait(10)
        c.start_controller()
        listed = ok(xce(c, "rsv", "list"))
        assert "maint" in listed and "maintenance" in listed and "team" in listed
        c.wait_passes(3)
        assert c.job(long)["state"] == "PEND"
        assert c.job(long)["reason"].startswith("reservation maint holds host w1")
        again = c.submit(command="true", walltime_s=60)
        c.wait_state(again, "DONE")

        # users list but may not create or delete; bad input is one line
        assert "maint" in ok(xce(c, "rsv", "list", token=USER_TOKEN))
        for args, token, words in [
            (("rsv", "del", "maint"), USER_TOKEN, "may not"),
            (
                ("rsv", "add", "x", "-m", "nohost", "-d", "1h", "--maintenance"),
                ADMIN_TOKEN,
                "'nohost' is not registered",
            ),
            (
                ("rsv", "add", "x", "-m", "w1", "-d", "1h", "-b", "soon", "--maintenance"),
                ADMIN_TOKEN,
                "--start 'soon' is not a time",
            ),
            (("rsv", "del", "nope"), ADMIN_TOKEN, "does not exist"),
        ]:
            done = xce(c, *args, token=token)
            assert done.returncode != 0 and words in done.stderr, (args, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Reservation maint is deleted" in ok(xce(c, "rsv", "del", "maint"))
        c.wait_state(long, "RUN", "DONE", timeout=60)
    finally:
        c.stop()
