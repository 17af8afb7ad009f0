"""Hostile review of the task service, played with real processes: a controller
and workers on 127.0.0.1, real cgroups."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from tests.integration.cluster import Cluster
from tests.integration.test_launch_e2e import _call, _job_env
from xce.worker.tasks.wire import CHALLENGE, EXIT, HEADER, HELLO, frame


def _freezer_dir(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            return Path("/sys/fs/cgroup/freezer") / path.lstrip("/")
    raise AssertionError(f"process {pid} has no freezer cgroup")


def _answer_to_garbage(address: str, timeout: float) -> dict[str, Any]:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        reader = sock.makefile("rb")
        head = reader.read(HEADER.size)
        assert len(head) == HEADER.size and HEADER.unpack(head)[0] == CHALLENGE
        reader.read(HEADER.unpack(head)[1])
        sock.sendall(frame(HELLO, b"not json"))
        head = reader.read(HEADER.size)
        assert len(head) == HEADER.size
        assert HEADER.unpack(head)[0] == EXIT
        return {"answered": True}


def test_a_task_started_into_a_frozen_cgroup_does_not_stop_the_worker(three: Cluster) -> None:
    """The window of `xce job resume` (assignment says run, the thaw has not run yet), or of
    a share frozen before the service hears of the stop: the cgroup is frozen while the
    service still accepts tasks for it. The task's child joins the cgroup before exec and is
    frozen there; the worker used to wait for that exec on its event loop, so the whole
    worker (every other request, its heartbeats, the thaw itself) stopped. The test freezes
    the job's cgroup itself to hold that window open. Without the fix the stalled worker stops
    renewing its contact, the job's keeper fences it, and the task (and the job) die with
    SIGKILL instead of running once thawed."""
    job_id, env = _job_env(three, "frz", 2)
    host = env["XCE_EXEC_HOST"]
    tasks = dict(item.split("=", 1) for item in env["XCE_LAUNCH_TASKS"].split(","))
    sleeper = next(
        p
        for p in psutil.process_iter(["cmdline", "environ"])
        if p.info["cmdline"] == ["sleep", "60"]
        and (p.info["environ"] or {}).get("XCE_JOB_ID") == job_id
    )
    freezer = _freezer_dir(sleeper.pid)
    req = {
        "job_id": job_id,
        "attempt": int(env["XCE_ATTEMPT"]),
        "host": host,
        "credential": env["XCE_LAUNCH_CRED"],
        "argv": ["sh", "-c", "echo thawed"],
        "env": {"PATH": "/usr/bin:/bin"},
        "task_id": 0,
        "local_task_id": 0,
    }
    (freezer / "freezer.state").write_text("FROZEN")
    result: list[Any] = []
    try:
        deadline = time.monotonic() + 10
        while (freezer / "freezer.state").read_text().strip() != "FROZEN":
            assert time.monotonic() < deadline, "the test could not freeze the job"
            time.sleep(0.05)
        launch = threading.Thread(
            target=lambda: result.append(_call(tasks[host], req)), daemon=True
        )
        launch.start()
        time.sleep(1.0)  # the task's child is in the frozen cgroup by now
        # the worker still answers while that start is stuck
        assert _answer_to_garbage(tasks[host], 15) == {"answered": True}
    finally:
        with contextlib.suppress(FileNotFoundError):  # gone: the keeper fenced the job
            (freezer / "freezer.state").write_text("THAWED")
    launch.join(60)
    assert result == [("thawed\n", {"exit_code": 0, "signal": None, "error": ""})], result
    assert three.job(job_id)["state"] == "RUN"  # not fenced: the worker never stalled
    three.control(job_id, "kill")
    three.wait_state(job_id, "EXIT", timeout=60)
