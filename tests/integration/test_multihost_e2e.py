"""Jobs across hosts with real processes: a controller and three workers on
127.0.0.1. A 6-slot `span[ptile=2]` job gets 2 slots on each host, its script runs on the
first and sees the allocation; a lost second host ends the whole job, naming that host."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from tests.integration.cluster import Cluster
from tests.integration.conftest import THREE_HOSTS

HOSTS = THREE_HOSTS


def test_a_ptile_job_gets_two_slots_on_each_host_and_sees_its_allocation(three: Cluster) -> None:
    job_id = three.submit(
        command='echo "hosts=$XCE_HOSTS"; echo "nodes=$XCE_NODELIST"; '
        'echo "num=$XCE_NUM_HOSTS"; echo "slots=$XCE_SLOTS"; '
        'echo "exec=$XCE_EXEC_HOST"; cat "$XCE_HOSTFILE"',
        slots=6,
        resources="span[ptile=2]",
    )
    job = three.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", (job, three.download(job_id, "stderr"))
    assert job["hosts"] == [{"host": h, "slots": 2} for h in HOSTS]
    assert job["exec_host"] == "2*w1:2*w2:2*w3" and job["host"] == "w1"
    out = three.download(job_id, "stdout").decode().splitlines()
    assert out == [
        "hosts=w1 w1 w2 w2 w3 w3",
        "nodes=w1,w2,w3",
        "num=3",
        "slots=6",
        "exec=w1",
        "w1 2",
        "w2 2",
        "w3 2",
    ]


def _shares(c: Cluster, worker: str) -> dict[str, str]:
    """The share cgroups a worker holds (name -> freezer state), read from the kernel."""
    from xce.worker.agent.hostinfo import cgroup_namespace
    from xce.worker.cgroups import detect

    backend = detect("auto", "", cgroup_namespace(worker, c.root / worker))
    out = {}
    for name in backend.existing():
        if name.endswith(".share"):
            cgroup = backend.open(name)
            state = "n/a"  # no freezer hierarchy (v2 or none): not checked
            dirs = getattr(cgroup, "dirs", {})
            if "freezer" in dirs:
                state = (Path(dirs["freezer"]) / "freezer.state").read_text().strip()
            out[name] = state
    return out


def test_every_host_holds_its_share_and_suspend_and_kill_reach_it(three: Cluster) -> None:
    wide = three.submit(command="sleep 60", slots=6, resources="span[ptile=2]")
    job = three.wait_state(wide, "RUN", timeout=60)
    name = f"{wide}.{job['attempt']}.share"
    # the hosts after the first keep a cgroup for the job's part there
    for worker in ("w2", "w3"):
        three.wait_for(lambda w=worker: name in _shares(three, w), 30, f"share on {worker}")
    assert _shares(three, "w1") == {}
    # 3-slot jobs no longer fit anywhere: each host has 2 of its 4 slots left
    small = three.submit(command="true", slots=3, resources="span[hosts=1]")
    three.wait_passes()
    assert three.job(small)["state"] == "PEND"
    three.control(wide, "stop")
    for worker in ("w2", "w3"):
        three.wait_for(
            lambda w=worker: _shares(three, w).get(name) in ("FROZEN", "n/a"),
            30,
            f"share frozen on {worker}",
        )
    three.control(wide, "resume")
    for worker in ("w2", "w3"):
        three.wait_for(
            lambda w=worker: _shares(three, w).get(name) in ("THAWED", "n/a"),
            30,
            f"share thawed on {worker}",
        )
    three.control(wide, "kill")
    three.wait_state(wide, "EXIT", timeout=60)
    for worker in ("w2", "w3"):
        three.wait_for(
            lambda w=worker: name not in _shares(three, w), 30, f"share removed on {worker}"
        )
    three.wait_state(small, "DONE", "EXIT", timeout=60)


def test_a_lost_second_host_ends_the_whole_job_naming_it(three: Cluster) -> None:
    job_id = three.submit(
        command="sleep 117.5", slots=6, resources="span[ptile=2]", queue="fragile"
    )  # on_host_failure = "exit"
    three.wait_state(job_id, "RUN", timeout=60)

    def running() -> bool:  # the script, on the first host (a number no other test uses)
        return any(
            p.info["cmdline"] == ["sleep", "117.5"] for p in psutil.process_iter(["cmdline"])
        )

    three.wait_for(running, 30, "the job's process")
    three.kill_worker("w3", signal.SIGKILL)
    job = three.wait_state(job_id, "EXIT", timeout=90)
    assert job["reason"] == "host w3 became unavailable", job
    three.wait_for(lambda: not running(), 60, "the first host's part killed")


def test_the_command_line_submits_across_hosts_and_lists_exec_host(three: Cluster) -> None:
    import json
    import os
    import subprocess
    import sys

    from tests.integration.cluster import ADMIN_TOKEN

    home = three.root / "home"
    home.mkdir()
    (home / "client.toml").write_text(f'controllers = ["{three.url}"]\n')
    env = {**os.environ, "XCE_CLIENT_CONFIG": str(home / "client.toml"), "XCE_TOKEN": ADMIN_TOKEN}
    env.pop("XCE_CONTROLLERS", None)

    def xce(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "xce", *args],
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def submit(*args: str) -> str:
        return json.loads(xce("job", "submit", "--json", "--user", "root", *args))["job_id"]

    job_id = submit("-n", "6", "-R", "span[ptile=2]", "--", "sleep", "30")
    three.wait_state(job_id, "RUN", timeout=60)
    assert "2*w1:2*w2:2*w3" in xce("job", "list")
    assert "exec_host: 2*w1:2*w2:2*w3" in xce("job", "show", job_id)
    whole = submit("-n", "2", "--exclusive", "--", "true")
    three.wait_passes()
    assert three.job(whole)["state"] == "PEND"  # no host is free of other jobs
    xce("job", "kill", job_id)
    job = three.wait_state(whole, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE" and job["hosts"] == [{"host": "w1", "slots": 4}], job
