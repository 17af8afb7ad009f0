"""GPUs without GPUs: real controller and workers on loopback with configured device ids.

The device nodes are real: char devices made by the test (copies of /dev/zero and /dev/full,
harmless) stand in for /dev/nvidia0 and /dev/nvidia1 (`worker.gpu_device_path`), and with
the cgroup v1 backend the kernel itself must refuse a job the node of a GPU it was not
granted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure, Cluster

DEVICES_V1 = Path("/sys/fs/cgroup/devices")
NODES = {"0": (1, 5), "1": (1, 7)}  # /dev/zero and /dev/full: reading them is harmless


def _nodes() -> Path:
    where = Path(tempfile.mkdtemp(prefix="xce-gpu-nodes-", dir="/tmp"))
    os.chmod(where, 0o755)
    for device, (major, minor) in NODES.items():
        path = where / f"nvidia{device}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod(path, 0o666)
    return where


@pytest.fixture
def gpu_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    if os.geteuid() != 0 or not os.access(DEVICES_V1, os.W_OK):
        pytest.skip("needs root and the cgroup v1 devices hierarchy")
    nodes = _nodes()
    c = Cluster(tmp_path / "cluster", queues='[[license]]\nname = "matlab"\ncount = 1\n')
    c.start_controller()
    c.start_worker(
        "g1",
        slots=4,
        attrs=(
            f'cgroup = "v1"\ngpu_device_path = "{nodes}/nvidia{{}}"\n'
            '[worker.attributes]\ngpu_model = "H200"\n[worker.gres]\ngpu = ["0", "1"]'
        ),
    )
    c.start_worker("c1", slots=4)
    try:
        yield c, nodes
    finally:
        c.stop()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()


# Each job reports its variables, then which GPU nodes it can open.
PROBE = (
    'echo "cuda=$CUDA_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES xce=$XCE_GPUS"; '
    "for n in 0 1; do if head -c 1 {nodes}/nvidia$n >/dev/null 2>&1; "
    'then echo "open $n"; else echo "denied $n"; fi; done; sleep {sleep}'
)


def _output(c: Cluster, job_id: str) -> str:
    return c.download(job_id, "stdout").decode()


def test_one_gpu_jobs_get_distinct_devices_and_can_open_only_their_own(
    gpu_cluster: tuple[Cluster, Path],
) -> None:
    c, nodes = gpu_cluster
    hosts = {h["name"]: h for h in c.get("/api/v1/hosts")["hosts"]}
    assert hosts["g1"]["gres"]["gpu"]["total"] == 2 and hosts["c1"]["gres"] == {}
    probe = PROBE.format(nodes=nodes, sleep=4)
    first = c.submit(command=probe, gres={"gpu": 1})
    second = c.submit(command=probe, resources='select[gpu_model=="H200"] rusage[gpu=1]')
    c.wait_state(first, "RUN")
    c.wait_state(second, "RUN")
    third = c.submit(command=probe, gres={"gpu": 1})
    c.wait_passes()
    waiting = c.job(third)
    assert waiting["state"] == "PEND" and "gpu" in waiting["reason"]
    granted = {c.job(j)["devices"][0] for j in (first, second)}
    assert granted == {"gpu:0", "gpu:1"}
    hosts = {h["name"]: h for h in c.get("/api/v1/hosts")["hosts"]}
    assert hosts["g1"]["gres"]["gpu"]["free"] == 0
    for job_id in (first, second):
        done = c.wait_state(job_id, "DONE", timeout=60)
        mine = done["devices"][0].split(":")[1]
        other = "1" if mine == "0" else "0"
        text = _output(c, job_id)
        assert f"cuda={mine} rocr={mine} xce={mine}" in text, text
        assert f"open {mine}" in text and f"denied {other}" in text, text
    done = c.wait_state(third, "DONE", timeout=60)
    assert done["devices"] in (["gpu:0"], ["gpu:1"])
    # a job without GPUs on the GPU host sees none and can open none; on a host without
    # GPUs nothing is bound or denied
    plain = c.submit(command=PROBE.format(nodes=nodes, sleep=0), resources="select[gpu_model]")
    text = _output(c, plain) if c.wait_state(plain, "DONE", timeout=60) else ""
    assert "cuda= rocr= xce=" in text and "denied 0" in text and "denied 1" in text, text


def test_impossible_requests_are_400_naming_the_resource(gpu_cluster: tuple[Cluster, Path]) -> None:
    c, _ = gpu_cluster
    for body, words in [
        ({"gres": {"gpu": 3}}, "3 gpu devices"),
        ({"gres": {"fpga": 1}}, "fpga"),
        ({"licenses": {"matlab": 2}}, "matlab"),
        ({"licenses": {"ansys": 1}}, "ansys"),
    ]:
        with pytest.raises(ApiFailure) as info:
            c.submit(command="true", **body)
        assert info.value.status == 400 and words in info.value.body["error"]["message"]


def test_licenses_are_counted_across_hosts(gpu_cluster: tuple[Cluster, Path]) -> None:
    c, _ = gpu_cluster
    a = c.submit(command="sleep 3", licenses={"matlab": 1}, resources="select[!gpu_model]")
    b = c.submit(command="true", licenses={"matlab": 1})
    c.wait_state(a, "RUN")
    c.wait_passes()
    assert "license matlab" in c.job(b)["reason"]
    c.wait_state(b, "DONE", timeout=60)


def _cli(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(c.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_options_views_and_a_restart_keep_the_grant(gpu_cluster: tuple[Cluster, Path]) -> None:
    c, _ = gpu_cluster
    done = _cli(
        c, "job", "submit", "--gpus", "1", "--license", "matlab:1", "--user", "root", "sleep 30"
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.split("<")[1].split(">")[0]
    running = c.wait_state(job, "RUN")
    granted = running["devices"]
    assert len(granted) == 1 and running["licenses"] == {"matlab": 1}
    table = _cli(c, "host", "list").stdout
    assert "GRES_FREE" in table and "gpu:1/2" in table, table
    shown = _cli(c, "host", "show", "g1").stdout
    assert f"in use {granted[0].split(':')[1]}" in shown, shown
    assert granted[0] in _cli(c, "job", "show", job).stdout
    bad = _cli(c, "job", "submit", "--gres", "gpu:x", "true")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--gres" in bad.stderr
    refused = _cli(c, "job", "submit", "--gpus", "9", "true")
    assert refused.returncode != 0 and "9 gpu devices" in refused.stderr, refused.stderr
    # the grant is in the WAL: a restarted controller still holds that device for the job
    assert c.controller is not None
    c.controller.send_signal(signal.SIGTERM)
    c.controller.wait(20)
    c.start_controller()
    assert c.job(job)["devices"] == granted
    other = c.submit(command="true", gres={"gpu": 2})  # needs the held one too: waits
    c.wait_passes()
    assert c.job(other)["state"] == "PEND"
    c.control(job, "kill")
    assert c.wait_state(other, "DONE", timeout=60)["devices"] == ["gpu:0", "gpu:1"]
    # accounting: the GPU count of the attempt (written off the request path: poll)
    c.wait_for(
        lambda: "GPUs: 2" in _cli(c, "job", "eff", other).stdout,
        30,
        "the accounting record of a 2-GPU job",
    )
    table = _cli(c, "acct", "-j", other, "--format", "jobid,allocgpus").stdout
    assert table.split()[-1] == "2", table


def test_a_failover_keeps_the_grant(tmp_path: Path) -> None:
    """The grant is replicated with JobStarted: the new primary holds the same device for
    the running job, gives the other to the next job, and never both to one."""
    from tests.integration.ha_cluster import HaCluster
    from tests.integration.test_ha import TAKEOVER_BOUND_S, submit_after_takeover

    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    try:
        c.start_pair()
        c.start_worker("g1", slots=4, attrs='[worker.gres]\ngpu = ["0", "1"]')
        first = c.submit(command="sleep 60", gres={"gpu": 1})
        granted = c.wait_state(first, "RUN")["devices"]
        c.wait_caught_up(1)
        c.kill_candidate(0)
        assert c.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
        assert c.job(first)["devices"] == granted
        second = submit_after_takeover(c, command="sleep 60", gres={"gpu": 1})
        assert c.wait_state(second, "RUN", timeout=60)["devices"] != granted
        third = submit_after_takeover(c, command="true", gres={"gpu": 1})
        c.wait_passes()
        assert c.job(third)["state"] == "PEND" and "gpu" in c.job(third)["reason"]
        c.control(first, "kill")
        assert c.wait_state(third, "DONE", timeout=60)["devices"] == granted
        c.control(second, "kill")
    finally:
        c.stop()


def test_a_gpu_node_missing_at_launch_is_not_left_open(tmp_path: Path) -> None:
    """nvidia-modprobe (setuid root) makes a missing /dev/nvidiaN the first time a CUDA
    program asks for it: a node absent when the job starts must not stay open to the job
    once it appears. The test plays nvidia-modprobe: it makes the other GPU's node while
    the job (granted the first GPU) runs, and the job then tries to open it."""
    if os.geteuid() != 0 or not os.access(DEVICES_V1, os.W_OK):
        pytest.skip("needs root and the cgroup v1 devices hierarchy")
    nodes = _nodes()
    (nodes / "nvidia1").unlink()  # not made yet on this host
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker(
        "g1",
        slots=4,
        attrs=(
            f'cgroup = "v1"\ngpu_device_path = "{nodes}/nvidia{{}}"\n'
            '[worker.gres]\ngpu = ["0", "1"]'
        ),
    )
    try:
        job = c.submit(
            command=(
                f"for i in $(seq 100); do [ -e {nodes}/nvidia1 ] && break; sleep 0.1; done; "
                f"if head -c 1 {nodes}/nvidia1 >/dev/null 2>&1; then echo 'open 1'; "
                "else echo 'denied 1'; fi"
            ),
            gres={"gpu": 1},
        )
        seen: list[dict] = []

        def settled(states: tuple[str, ...]) -> bool:
            seen[:] = [c.job(job)]
            return seen[0]["state"] in states

        c.wait_for(lambda: settled(("RUN", "DONE", "EXIT")), 60, "the job to start or end")
        os.mknod(nodes / "nvidia1", 0o666 | 0o020000, os.makedev(*NODES["1"]))
        os.chmod(nodes / "nvidia1", 0o666)
        c.wait_for(lambda: settled(("DONE", "EXIT")), 60, "the job to end")
        done = seen[0]
        text = _output(c, job) if done["state"] == "DONE" else ""
        assert "open 1" not in text, (done, text)
        if done["state"] == "EXIT":  # refused: the node's numbers are unknown
            assert "nvidia1 does not exist" in done["reason"], done
        # no devices cgroup is left behind by the attempt, started or not
        left = [p for ns in DEVICES_V1.glob("xce-g1-*") for p in ns.iterdir() if p.is_dir()]
        assert left == [], left
    finally:
        c.stop()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()


def test_under_cgroup_v2_a_job_cannot_open_a_gpu_it_was_not_granted(tmp_path: Path) -> None:
    """cgroup v2 has no devices files: the worker attaches an eBPF device program to the
    job's cgroup. A hostile job that unsets CUDA_VISIBLE_DEVICES and opens the other GPU's
    node directly is refused by the kernel; its own node opens."""
    v2 = next(
        (
            line.split()[1]
            for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[2] == "cgroup2"
        ),
        None,
    )
    if os.geteuid() != 0 or v2 is None or not os.access(v2, os.W_OK):
        pytest.skip("needs root and a writable cgroup2 mount")
    nodes = _nodes()
    before = set(Path(v2).glob("xce-g1-*"))
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker(
        "g1",
        slots=4,
        attrs=(
            f'cgroup = "v2"\ngpu_device_path = "{nodes}/nvidia{{}}"\n'
            '[worker.gres]\ngpu = ["0", "1"]'
        ),
    )
    try:
        job = c.submit(
            command="unset CUDA_VISIBLE_DEVICES; " + PROBE.format(nodes=nodes, sleep=0),
            gres={"gpu": 1},
        )
        done = c.wait_state(job, "DONE", timeout=60)
        mine = done["devices"][0].split(":")[1]
        other = "1" if mine == "0" else "0"
        text = _output(c, job)
        assert f"open {mine}" in text and f"denied {other}" in text, text
    finally:
        c.stop()
        for left in set(Path(v2).glob("xce-g1-*")) - before:  # the worker's namespace
            with contextlib.suppress(OSError):
                left.rmdir()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()


def test_a_devices_fence_that_cannot_be_set_up_ends_the_job_instead_of_hanging_it(
    tmp_path: Path,
) -> None:
    """A cgroup error while making the job's cgroup (here: the worker's cgroup v2 parent
    holds a device program attached without BPF_F_ALLOW_MULTI, as older container runtimes
    do, so the job's own program cannot be attached) escaped the worker's launch error
    handling: the controller kept the job RUN holding its GPU and the worker retried the
    launch at every heartbeat. It must end the job, naming why, and free the GPU."""
    from xce.worker.cgroups import devbpf

    v2 = next(
        (
            line.split()[1]
            for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[2] == "cgroup2"
        ),
        None,
    )
    if os.geteuid() != 0 or v2 is None or not os.access(v2, os.W_OK):
        pytest.skip("needs root and a writable cgroup2 mount")
    parent = Path(v2) / f"xcetest-{os.getpid()}-noattach"
    parent.mkdir()
    devbpf.attach(str(parent), (), flags=0)  # allows everything, forbids programs below
    nodes = _nodes()
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker(
        "g1",
        slots=4,
        attrs=(
            f'cgroup = "v2"\ncgroup_parent = "/{parent.name}"\n'
            f'gpu_device_path = "{nodes}/nvidia{{}}"\n[worker.gres]\ngpu = ["0", "1"]'
        ),
    )
    try:
        job = c.submit(command="true", gres={"gpu": 1})
        done = c.wait_state(job, "EXIT", timeout=30)
        assert "device program" in done["reason"], done
        free = {h["name"]: h for h in c.get("/api/v1/hosts")["hosts"]}["g1"]["gres"]
        assert free["gpu"]["free"] == 2, free
    finally:
        c.stop()
        for left in sorted(parent.rglob("*"), key=lambda p: -len(str(p))):
            if left.is_dir():
                with contextlib.suppress(OSError):
                    left.rmdir()
        parent.rmdir()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()
