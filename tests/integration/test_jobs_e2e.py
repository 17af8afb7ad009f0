"""Real jobs through a real controller and two real workers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.cluster import ApiFailure, Cluster
from tests.worker.linux_users import LinuxUsers, linux_users  # noqa: F401


def _leader_of(cluster: Cluster, job_id: str) -> int:
    """The job's leader pid, from the worker's own record of the attempt (keeper.json)."""
    job = cluster.job(job_id)
    name = job_id.replace("[", "_").replace("]", "")
    keeper = cluster.root / job["host"] / "state" / f"{name}.{job['attempt']}" / "keeper.json"
    cluster.wait_for(keeper.exists, 10, f"keeper of {job_id}")
    return int(json.loads(keeper.read_text())["leader"])


def _grows(path: Path, seconds: float = 0.6) -> bool:
    before = path.stat().st_size if path.exists() else 0
    time.sleep(seconds)
    return (path.stat().st_size if path.exists() else 0) > before


def test_job_writes_file_and_is_done_with_outputs(cluster: Cluster) -> None:
    upload = cluster.request("POST", "/api/v1/uploads", raw=b"3\n1\n2\n")["upload_id"]
    job_id = cluster.submit(
        command="mkdir -p out && sort -n data/in.txt > out/sorted.txt && echo finished "
        "&& echo warn >&2",
        inputs={"data/in.txt": upload},
        outputs=["out/*.txt"],
    )
    job = cluster.wait_state(job_id, "DONE", "EXIT")
    assert job["state"] == "DONE", job
    assert job["exit_code"] == 0
    assert cluster.download(job_id, "out/sorted.txt") == b"1\n2\n3\n"
    assert cluster.download(job_id, "stdout") == b"finished\n"
    assert cluster.download(job_id, "stderr") == b"warn\n"
    files = {f["path"] for f in cluster.get(f"/api/v1/jobs/{job_id}/files")["files"]}
    assert files == {"stdout", "stderr", "out/sorted.txt"}
    assert job["usage"]["wall_time_s"] >= 0


def test_exit_code_is_recorded(cluster: Cluster) -> None:
    job = cluster.wait_state(cluster.submit(command="exit 3"), "DONE", "EXIT")
    assert job["state"] == "EXIT"
    assert job["exit_code"] == 3
    assert job["exit_signal"] is None


def test_usage_is_collected(cluster: Cluster) -> None:
    # A second of CPU, not of wall time: the job's one slot is one core that it may share
    # with whatever else this machine runs.
    code = "x = bytearray(150 * 1024 * 1024); import time\nwhile time.process_time() < 1.0: pass\n"
    job_id = cluster.submit(script=f"#!/usr/bin/env python3\n{code}")
    job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", (job, cluster.download(job_id, "stderr"))
    usage = job["usage"]
    assert usage["cpu_time_s"] >= 0.7, usage
    assert usage["max_rss_bytes"] >= 150 * 1024 * 1024, usage
    assert usage["wall_time_s"] >= 1.0, usage
    listed = cluster.get("/api/v1/jobs?state=DONE")["jobs"]
    assert any(j["id"] == job_id and j["usage"]["cpu_time_s"] >= 0.7 for j in listed)


def test_suspend_resume_kill_a_running_job(cluster: Cluster, tmp_path: Path) -> None:
    mark = tmp_path / "ticks"
    # A child that leaves the job's session is suspended and killed with it (its cgroup).
    job_id = cluster.submit(
        command=f"setsid sh -c 'while :; do echo t >> {mark}; sleep 0.05; done' & sleep 60"
    )
    cluster.wait_state(job_id, "RUN")
    leader = _leader_of(cluster, job_id)
    cluster.wait_for(lambda: _grows(mark), 10, "the job running")

    cluster.control(job_id, "stop")
    assert cluster.job(job_id)["state"] == "USUSP"
    time.sleep(0.3)
    assert not _grows(mark), "a process of the job ran while it was suspended"

    cluster.control(job_id, "resume")
    assert cluster.job(job_id)["state"] == "RUN"
    cluster.wait_for(lambda: _grows(mark), 10, "the job running again")

    cluster.control(job_id, "kill")
    job = cluster.wait_state(job_id, "EXIT", timeout=20)
    assert job["exit_signal"] == signal.SIGTERM
    assert job["reason"] == "killed"
    assert not psutil.pid_exists(leader) or psutil.Process(leader).status() == "zombie"
    assert not _grows(mark), "a process of the job outlived it"
    with pytest.raises(ApiFailure) as err:
        cluster.control(job_id, "kill")
    assert err.value.status == 409
    assert "EXIT" in err.value.body["error"]["message"]


def test_kill_of_suspended_job_that_ignores_sigterm(cluster: Cluster) -> None:
    job_id = cluster.submit(command="trap '' TERM; sleep 60 & wait; sleep 60")
    cluster.wait_state(job_id, "RUN")
    _leader_of(cluster, job_id)
    cluster.control(job_id, "stop")
    cluster.control(job_id, "kill")
    job = cluster.wait_state(job_id, "EXIT", timeout=20)
    assert job["exit_signal"] == signal.SIGKILL


def test_walltime_limit_kills_the_job(cluster: Cluster) -> None:
    job = cluster.wait_state(cluster.submit(command="sleep 30", walltime_s=1), "EXIT", timeout=20)
    assert job["reason"] == "walltime limit exceeded"
    assert job["exit_signal"] == signal.SIGTERM


def test_requeue_runs_the_job_again(cluster: Cluster) -> None:
    job_id = cluster.submit(command="echo attempt $XCE_ATTEMPT; sleep 60")
    cluster.wait_state(job_id, "RUN")
    first_pid = _leader_of(cluster, job_id)
    cluster.control(job_id, "requeue")
    cluster.wait_for(
        lambda: cluster.job(job_id)["attempt"] == 1 and cluster.job(job_id)["state"] == "RUN",
        30,
        "attempt 1 running",
    )
    # The first attempt ended before the second could start (a requeue waits for it).
    assert (
        not psutil.pid_exists(first_pid)
        or psutil.Process(first_pid).status() == psutil.STATUS_ZOMBIE
    )
    # Killed once it has printed (under load, RUN can come before the shell's echo).
    cluster.wait_for(
        lambda: "attempt 1" in cluster.get(f"/api/v1/jobs/{job_id}/tail")["data"],
        20,
        "attempt 1's output in the live tail",
    )
    cluster.control(job_id, "kill")
    cluster.wait_state(job_id, "EXIT")
    assert cluster.download(job_id, "stdout") == b"attempt 1\n"


def test_array_limit_is_never_exceeded(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "array.log"
    job_id = cluster.submit(
        command=f'echo "$XCE_ARRAY_INDEX $XCE_ARRAY_ID $XCE_JOB_ID $(date +%s.%N) start" >> {log};'
        f' sleep 0.05; echo "$XCE_ARRAY_INDEX x x $(date +%s.%N) end" >> {log}',
        array="1-1000%10",
    )
    assert cluster.job(job_id)["kind"] == "array"

    def finished() -> bool:
        counts = cluster.job(job_id)["array"]["counts"]
        return counts["DONE"] + counts["EXIT"] == 1000

    cluster.wait_for(finished, 300, "1000 tasks")
    view = cluster.job(job_id)
    assert view["array"]["counts"]["DONE"] == 1000, view
    events = []
    seen = set()
    for line in log.read_text().splitlines():
        index, array_id, task, ts, kind = line.split()
        if kind == "start":
            assert array_id == job_id and task == f"{job_id}[{index}]"
            seen.add(int(index))
        events.append((float(ts), 0 if kind == "end" else 1))
    assert seen == set(range(1, 1001))
    running = peak = 0
    for _, delta in sorted(events):
        running += 1 if delta else -1
        peak = max(peak, running)
    assert 2 <= peak <= 10, peak


def test_array_task_and_whole_array_control(cluster: Cluster) -> None:
    job_id = cluster.submit(command="sleep 60", array="1-20:2%3")
    cluster.wait_for(lambda: cluster.job(job_id)["array"]["counts"]["RUN"] == 3, 20, "3 running")
    cluster.control(f"{job_id}[19]", "kill")  # not started yet
    assert cluster.job(f"{job_id}[19]")["state"] == "EXIT"
    cluster.control(f"{job_id}[1]", "stop")
    assert cluster.job(f"{job_id}[1]")["state"] == "USUSP"
    cluster.control(job_id, "stop")
    counts = cluster.job(job_id)["array"]["counts"]
    assert counts["USUSP"] == 3 and counts["PSUSP"] == 6, counts
    cluster.control(job_id, "kill")
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "EXIT", 20, "array killed")
    assert cluster.job(job_id)["array"]["counts"]["EXIT"] == 10


def test_afterok_waits_and_afternotok_never_runs(cluster: Cluster) -> None:
    first = cluster.submit(command="sleep 2")
    after = cluster.submit(command="echo after", dependency=f"afterok:{first}")
    failed = cluster.submit(command="exit 1")
    never = cluster.submit(command="echo never", dependency=f"afterok:{failed}")
    cluster.wait_passes()
    assert cluster.job(after)["state"] == "PEND"
    assert cluster.job(after)["reason"] == "waiting for dependency"
    cluster.wait_state(first, "DONE")
    cluster.wait_state(after, "DONE")
    assert cluster.job(after)["start_time"] >= cluster.job(first)["end_time"]
    cluster.wait_state(failed, "EXIT")
    cluster.wait_passes()
    job = cluster.job(never)
    assert job["state"] == "PEND" and job["reason"] == "dependency can never be satisfied"


def test_worker_sigkill_makes_host_unavailable_and_requeues(cluster: Cluster) -> None:
    cluster.post("/api/v1/hosts/w2/close")
    requeued = cluster.submit(command="sleep 60")
    exited = cluster.submit(command="sleep 60", queue="fragile")
    cluster.wait_state(requeued, "RUN")
    cluster.wait_state(exited, "RUN")
    assert cluster.job(requeued)["host"] == "w1"
    cluster.post("/api/v1/hosts/w2/open")
    cluster.kill_worker("w1")
    cluster.wait_for(
        lambda: cluster.get("/api/v1/hosts/w1")["status"] == "unavailable", 10, "w1 unavailable"
    )
    # The fence: unavailable, but its jobs are left alone for fence_timeout_s (the worker,
    # were it only cut off, kills them itself by then), so nothing runs twice.
    lost_at = time.time()
    host = cluster.get("/api/v1/hosts/w1")
    assert host["liveness"]["fence_timeout_s"] == cluster.fence_timeout
    assert host["liveness"]["jobs_requeued_in_s"] > 0
    job = cluster.job(requeued)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w1", 0)
    cluster.wait_for(lambda: cluster.job(requeued)["attempt"] == 1, 20, "requeued after fence")
    assert time.time() - lost_at >= cluster.fence_timeout - 1.5
    job = cluster.wait_state(requeued, "RUN", timeout=20)
    assert job["host"] == "w2" and job["attempt"] == 1
    gone = cluster.job(exited)
    assert gone["state"] == "EXIT" and "unavailable" in gone["reason"]
    # The host comes back online when its worker does.
    cluster.start_worker("w1")
    assert cluster.get("/api/v1/hosts/w1")["status"] == "online"


def test_closed_queue_and_inactive_queue(cluster: Cluster) -> None:
    cluster.post("/api/v1/queues/normal/deactivate")
    job_id = cluster.submit(command="true")
    cluster.wait_passes()
    job = cluster.job(job_id)
    assert job["state"] == "PEND" and "inactive" in job["reason"]
    cluster.post("/api/v1/queues/normal/close")
    with pytest.raises(ApiFailure) as err:
        cluster.submit(command="true")
    assert err.value.status == 409 and "closed" in err.value.body["error"]["message"]
    cluster.post("/api/v1/queues/normal/activate")
    cluster.wait_state(job_id, "DONE")


def test_drain_and_close_hosts(cluster: Cluster) -> None:
    cluster.post("/api/v1/hosts/w1/close", {"reason": "maintenance"})
    cluster.post("/api/v1/hosts/w2/drain")
    host = cluster.get("/api/v1/hosts/w1")
    assert host["status"] == "offline" and host["admin_reason"] == "maintenance"
    assert cluster.get("/api/v1/hosts/w2")["admin"] == "drained"
    job_id = cluster.submit(command="true")
    cluster.wait_passes()
    assert cluster.job(job_id)["state"] == "PEND"
    cluster.post("/api/v1/hosts/w2/open")
    assert cluster.wait_state(job_id, "DONE")["host"] == "w2"


def test_bad_requests_get_json_4xx(cluster: Cluster) -> None:
    cases = [
        ({"command": "true", "queue": "nope"}, 400, "nope"),
        ({"command": "true", "array": "1-"}, 400, "array"),
        ({"command": "true", "memory_mb": -1}, 400, "memory_mb"),
        ({"command": "true", "slots": "two"}, 400, "slots"),
        ({"command": "true", "inputs": {"../etc/passwd": "0" * 32}}, 400, ".."),
        ({"command": "true", "outputs": ["/etc/shadow"]}, 400, "relative"),
        ({"command": "true", "surprise": 1}, 400, "surprise"),
    ]
    for body, status, needle in cases:
        with pytest.raises(ApiFailure) as err:
            cluster.post("/api/v1/jobs", body)
        assert err.value.status == status, body
        assert needle in err.value.body["error"]["message"], (body, err.value.body)
    with pytest.raises(ApiFailure) as err:
        cluster.request("POST", "/api/v1/jobs", raw=b"x" * (2 * 1024 * 1024))
    assert err.value.status in (400, 413)
    with pytest.raises(ApiFailure) as err:
        cluster.post("/api/v1/jobs", {"command": "x" * 2_000_000})
    assert err.value.status == 413 and err.value.body["error"]["code"] == "payload_too_large"
    with pytest.raises(ApiFailure) as err:
        cluster.get("/api/v1/jobs/999")
    assert err.value.status == 404
    with pytest.raises(ApiFailure) as err:
        cluster.get("/api/v1/jobs", token=None)
    assert err.value.status == 401
    assert cluster.controller is not None and cluster.controller.poll() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a user")
def test_job_runs_as_the_submitting_user(cluster: Cluster, linux_users: LinuxUsers) -> None:
    user = linux_users.user()
    job_id = cluster.submit(command="id -un; echo $HOME $USER; pwd", user=user.name)
    job = cluster.wait_state(job_id, "DONE", "EXIT")
    assert job["state"] == "DONE", cluster.download(job_id, "stderr")
    out = cluster.download(job_id, "stdout").decode().split()
    assert out[0] == user.name and out[2] == user.name
    assert out[3].startswith(str(cluster.jobs_root))  # its own directory, which it may enter
    missing = cluster.wait_state(cluster.submit(command="true", user="nosuchuser9"), "EXIT")
    assert re.search("does not exist", missing["reason"]), missing


def test_resource_requirement_picks_the_host(cluster: Cluster) -> None:
    on_r2 = cluster.submit(command="true", resources="select[rack==r2 && maxslots>=4]")
    assert cluster.wait_state(on_r2, "DONE")["host"] == "w2"
    with pytest.raises(ApiFailure) as refused:  # no host could ever run it
        cluster.submit(command="true", resources="select[type==SPARC]")
    assert refused.value.status == 400 and "select[type==SPARC]" in str(refused.value.body)
    nowhere = cluster.submit(command="true", resources="select[type==SPARC]", defer=True)
    cluster.wait_passes()
    job = cluster.job(nowhere)
    assert job["state"] == "PEND" and "resource requirement" in job["reason"]
