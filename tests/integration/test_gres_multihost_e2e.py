"""GPUs on a multi-host job with real processes: a controller and two
workers on loopback, each with configured GPUs whose nodes are real char devices made by
the test (copies of /dev/zero and /dev/full, as in test_gres_e2e.py). A 2-host job asking
one GPU per host gets one on each; `xce launch` tasks on each host see that host's own
device in CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES / XCE_GPUS and, through the cgroup v1
devices hierarchy (the job's cgroup on the first host, the share's on the second), can open
only it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.test_gres_e2e import DEVICES_V1, _cli, _nodes

# g1 declares 0 then 1, g2 declares 1 then 0: lowest in declared order is granted first,
# so the two hosts grant different ids and a task seeing the wrong host's grant would show.
ORDER = {"g1": '["0", "1"]', "g2": '["1", "0"]'}


@pytest.fixture
def two_gpu_hosts(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    if os.geteuid() != 0 or not os.access(DEVICES_V1, os.W_OK):
        pytest.skip("needs root and the cgroup v1 devices hierarchy")
    nodes = _nodes()
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    for name, ids in ORDER.items():
        c.start_worker(
            name,
            slots=2,
            attrs=(
                f'cgroup = "v1"\ngpu_device_path = "{nodes}/nvidia{{}}"\n[worker.gres]\ngpu = {ids}'
            ),
        )
    c.wait_for(lambda: len(c.get("/api/v1/hosts")["hosts"]) == 2, 60, "two workers")
    try:
        yield c, nodes
    finally:
        c.stop()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()


def test_launch_tasks_see_and_open_only_their_own_hosts_gpu(
    two_gpu_hosts: tuple[Cluster, Path],
) -> None:
    c, nodes = two_gpu_hosts
    probe = (
        'echo "at=$XCE_EXEC_HOST cuda=$CUDA_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES '
        'xce=$XCE_GPUS"; for n in 0 1; do if head -c 1 ' + str(nodes) + "/nvidia$n "
        '>/dev/null 2>&1; then echo "at=$XCE_EXEC_HOST open $n"; else '
        'echo "at=$XCE_EXEC_HOST denied $n"; fi; done'
    )
    script = f"xce launch --per-host 1 -- sh -c '{probe}'; echo status=$?; sleep 3"
    job_id = c.submit(command=script, slots=2, resources="span[ptile=1]", gres={"gpu": 1})
    running = c.wait_state(job_id, "RUN", timeout=60)
    assert [(p["host"], p["devices"]) for p in running["hosts"]] == [
        ("g1", ["gpu:0"]),
        ("g2", ["gpu:1"]),
    ], running
    shown = _cli(c, "job", "show", job_id).stdout
    assert "g1*1 gpu:0" in shown and "g2*1 gpu:1" in shown, shown
    hosts = {h["name"]: h for h in c.get("/api/v1/hosts")["hosts"]}
    assert hosts["g1"]["gres"]["gpu"]["free"] == 1 and hosts["g2"]["gres"]["gpu"]["free"] == 1
    # a second 2-host job takes the other GPU of each host: grants never overlap
    other = c.submit(command="sleep 1", slots=2, resources="span[ptile=1]", gres={"gpu": 1})
    second = c.wait_state(other, "RUN", "DONE", timeout=60)
    assert [(p["host"], p["devices"]) for p in second["hosts"]] == [
        ("g1", ["gpu:1"]),
        ("g2", ["gpu:0"]),
    ], second
    job = c.wait_state(job_id, "DONE", "EXIT", timeout=90)
    out = c.download(job_id, "stdout").decode()
    assert job["state"] == "DONE" and "status=0" in out, (job, out)
    lines = {line.split(": ", 1)[-1] for line in out.splitlines()}
    for host, mine, theirs in (("g1", "0", "1"), ("g2", "1", "0")):
        assert f"at={host} cuda={mine} rocr={mine} xce={mine}" in lines, out
        assert f"at={host} open {mine}" in lines, out
        assert f"at={host} denied {theirs}" in lines, out
    c.wait_state(other, "DONE", timeout=60)
