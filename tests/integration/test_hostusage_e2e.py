"""Usage and OOM kills on every host of a multi-host job, with real
processes: a controller and three workers on 127.0.0.1, real v1 cgroups. A task started by
`xce launch` on a host after the first runs in that host's share cgroup; its CPU counts in
the job's final usage, and the OOM killer killing it there ends the whole job."""

from __future__ import annotations

import psutil

from tests.integration.cluster import Cluster
from tests.integration.conftest import THREE_HOSTS

HOSTS = THREE_HOSTS
# Burns `S` seconds of its own CPU time (not wall time: the test machine is shared).
BURN = "import time\\nwhile time.process_time() < 2.0: pass"


def test_the_jobs_cpu_time_counts_every_hosts_tasks(three: Cluster) -> None:
    # one task per host, each burning 2 s of CPU: one on the first host (the job's own
    # cgroup), one on the second (its share cgroup)
    script = f"xce launch --per-host 1 -- python3 -c \"$(printf '{BURN}')\"; echo status=$?"
    job_id = three.submit(command=script, slots=4, resources="span[ptile=2]")
    job = three.wait_state(job_id, "DONE", "EXIT", timeout=180)
    out = three.download(job_id, "stdout").decode()
    assert job["state"] == "DONE" and "status=0" in out, (job, out)
    assert [h["host"] for h in job["hosts"]] == ["w1", "w2"], job["hosts"]
    cpu = job["usage"]["cpu_time_s"]
    # the first host alone would be ~2 s (+ the launcher's start-up); both hosts >= 4 s
    assert cpu >= 3.9, job["usage"]
    # each host's part, in allocation order (xce job show --json gives the same view)
    parts = job["host_usage"]
    assert [p["host"] for p in parts] == ["w1", "w2"], parts
    assert all(p["cpu_time_s"] >= 1.9 for p in parts), parts
    assert abs(sum(p["cpu_time_s"] for p in parts) - cpu) < 0.01, (parts, cpu)
    assert job["usage"]["max_rss_bytes"] == max(p["max_rss_bytes"] for p in parts)


def _sleepers(tag: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == [tag]]


def test_an_oom_kill_on_another_host_ends_the_whole_job(three: Cluster) -> None:
    # w1 keeps a sleeper (in the job's cgroup) and the script; w2's task allocates far past
    # the job's 200 MB per host and is killed by the OOM killer in w2's share cgroup
    hog = "x = bytearray(1 << 30)"
    script = (
        "xce launch --host w1 -- sleep 173.5 & "
        f"xce launch --host w2 -- python3 -c '{hog}'; echo hog=$?; sleep 173.5"
    )
    job_id = three.submit(command=script, slots=4, resources="span[ptile=2]", memory_mb=200)
    job = three.wait_state(job_id, "EXIT", "DONE", timeout=120)
    assert job["state"] == "EXIT", job
    assert "host w2" in job["reason"] and "OOM" in job["reason"], job["reason"]
    assert "200 MB" in job["reason"], job["reason"]
    # every host's part is killed: the first host's script and task too
    three.wait_for(lambda: not _sleepers("173.5"), 60, "the first host's part killed")
