"""GPU usage with a real worker and a stand-in NVML: the worker process imports
a `pynvml` module the test writes (reporting 50 % busy and 1 GiB used on every GPU), samples
the job's granted GPU while it runs, and the figures reach the finish report, the job's
usage, the accounting record, `xce acct --format ...,gpuutil,gpumem` and `xce job eff`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.test_gres_e2e import DEVICES_V1, _cli, _nodes

FAKE_NVML = """
class NVMLError(Exception):
    pass
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
class _U: gpu = 50
class _M: used = 1 << 30; total = 2 << 30
def nvmlDeviceGetUtilizationRates(h): return _U()
def nvmlDeviceGetMemoryInfo(h): return _M()
"""


def test_gpu_utilisation_and_memory_peak_reach_usage_and_accounting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0 or not os.access(DEVICES_V1, os.W_OK):
        pytest.skip("needs root and the cgroup v1 devices hierarchy")
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_NVML)
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{os.environ.get('PYTHONPATH', '')}")
    nodes = _nodes()
    c = Cluster(tmp_path / "cluster")
    try:
        c.start_controller()
        c.start_worker(
            "g1",
            slots=2,
            attrs=(
                f'cgroup = "v1"\ngpu_device_path = "{nodes}/nvidia{{}}"\n'
                '[worker.gres]\ngpu = ["0", "1"]'
            ),
        )
        job = c.submit(command="sleep 2", gres={"gpu": 1})
        plain = c.submit(command="sleep 1")
        done = c.wait_state(job, "DONE", timeout=90)
        assert done["usage"]["gpu_util_pct"] == 50.0, done["usage"]
        assert done["usage"]["gpu_mem_peak_bytes"] == 1 << 30, done["usage"]
        other = c.wait_state(plain, "DONE", timeout=90)["usage"]
        assert other["gpu_util_pct"] == 0 and other["gpu_mem_peak_bytes"] == 0
        c.wait_for(
            lambda: "GPU Utilization: 50.0%" in _cli(c, "job", "eff", job).stdout,
            30,
            "the accounting record with the GPU figures",
        )
        table = _cli(c, "acct", "-j", job, "--format", "jobid,gpuutil,gpumem").stdout
        assert table.split()[-2:] == ["50.0%", "1.00G"], table
        none = _cli(c, "acct", "-j", plain, "--format", "jobid,gpuutil,gpumem").stdout
        assert none.split()[-2:] == ["-", "-"], none
    finally:
        c.stop()
        for node in nodes.iterdir():
            node.unlink()
        nodes.rmdir()
