"""The worker's devices: configured, detected through the real NVML library (absent driver:
graceful, config only), the binding variables, and the devices cgroup of a v1 job."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xce.worker.cgroups.devices import deny_entries
from xce.worker.devices import gpus


def _nvml_driver() -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_GPU = _nvml_driver()


def test_configured_gpus_skip_detection_and_other_kinds_are_kept() -> None:
    host = gpus.host_devices({"gpu": ("0", "1"), "fpga": ("a",)}, "/x/n{}")
    assert host.source == "config" and host.gpus == ("0", "1")
    assert host.devices["fpga"] == ("a",) and host.gpu_node("1") == "/x/n1"


@pytest.mark.skipif(HAS_GPU, reason="a driver is present: the gpu-marked test covers it")
def test_without_a_driver_the_host_has_only_its_configured_devices(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("pynvml")  # the real library, failing as it does without a driver
    with caplog.at_level(logging.INFO, logger="xce.worker.gpus"):
        host = gpus.host_devices({"fpga": ("0",)})
    assert host.gpus == () and host.devices == {"fpga": ("0",)} and host.attributes == {}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no GPUs" in lines[0], lines
    assert gpus.host_devices(None).source == "none"


class _FakeNvml:
    """NVML as a host reports it where the driver numbered the nodes unlike NVML's PCI
    order: index 0 is /dev/nvidia1 and index 1 is /dev/nvidia0."""

    class NVMLError(Exception):
        pass

    MINORS = (1, 0)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return len(self.MINORS)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return self.MINORS[handle]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("Memory", (), {"total": 141 * 2**30})()


def test_detected_gpus_are_fenced_by_their_own_nodes_not_by_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job granted NVML index 0 must be denied the node of index 1 (/dev/nvidia0 here),
    not /dev/nvidia1, which is its own GPU: fencing by index would leave the other job's
    GPU open to it."""
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    host = gpus.host_devices(None)
    assert host.source == "nvml" and host.gpus == ("0", "1")
    assert gpus.denied_nodes(["gpu:0"], host) == ["/dev/nvidia0"]
    assert gpus.denied_nodes(["gpu:1"], host) == ["/dev/nvidia1"]
    assert gpus.host_devices(None, "/host/dev/nvidia{}").gpu_node("0") == "/host/dev/nvidia1"


def test_model_names_drop_the_vendor() -> None:
    assert gpus.model_name(b"NVIDIA H200") == "H200"
    assert gpus.model_name("Tesla V100-SXM2-16GB") == "V100-SXM2-16GB"
    assert gpus.model_name("NVIDIA GeForce RTX 4090") == "GeForce-RTX-4090"


def test_environment_names_exactly_the_granted_gpus() -> None:
    host = gpus.HostDevices({"gpu": ("0", "1", "2")})
    env = gpus.job_env(["gpu:2", "gpu:0", "fpga:x"], host)
    assert env == {"CUDA_VISIBLE_DEVICES": "2,0", "ROCR_VISIBLE_DEVICES": "2,0", "XCE_GPUS": "2,0"}
    assert gpus.job_env([], host)["CUDA_VISIBLE_DEVICES"] == ""
    assert gpus.job_env([], gpus.HostDevices()) == {}
    assert gpus.denied_nodes(["gpu:1"], host) == ["/dev/nvidia0", "/dev/nvidia2"]


def test_deny_entries_read_the_nodes_major_and_minor(tmp_path: Path) -> None:
    assert deny_entries(["/dev/null", "/dev/null"]) == ("c 1:3 rwm",)
    (tmp_path / "plain").write_text("")
    with pytest.raises(RuntimeError, match="not a device node"):
        deny_entries([str(tmp_path / "plain")])
    # absent: nvidia-modprobe (setuid) may make it later, so it is denied by its numbers,
    # and a missing node whose numbers are unknown refuses the launch (fail closed)
    assert deny_entries(["/dev/nvidia250"]) == ("c 195:250 rwm",)
    with pytest.raises(RuntimeError, match="does not exist"):
        deny_entries([str(tmp_path / "nvidia9")])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU and driver here")
def test_nvml_lists_the_gpus_with_model_and_memory() -> None:
    host = gpus.host_devices(None)
    assert host.source == "nvml" and host.gpus
    assert host.attributes["gpu_model"] and int(host.attributes["gpu_memory_mb"]) > 0
    # each GPU is fenced by its own node, named by NVML's minor number (not its index)
    for device in host.gpus:
        assert stat.S_ISCHR(os.stat(host.gpu_node(device)).st_mode), host.gpu_node(device)
    # a process given one GPU sees exactly that one through CUDA's variable
    if shutil.which("nvidia-smi"):
        env = {**os.environ, **gpus.job_env([f"gpu:{host.gpus[0]}"], host)}
        out = subprocess.run(
            [sys.executable, "bench/gpu_check.py", "--visible"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert f"visible={host.gpus[0]}" in out, out


def test_a_node_path_a_user_could_change_is_refused(tmp_path: Path) -> None:
    from xce.worker.cgroups.devices import untrusted

    assert untrusted("/dev/null") is None
    owned = tmp_path / "site-dev"
    owned.mkdir()
    os.mknod(owned / "nvidia0", 0o666 | 0o020000, os.makedev(1, 5))
    if os.geteuid() == 0:
        assert untrusted(str(owned / "nvidia0")) is None
        os.chown(owned, 1000, 1000)  # a directory a user owns
        assert "belongs to uid 1000" in (untrusted(str(owned / "nvidia0")) or "")
        with pytest.raises(RuntimeError, match="not trusted"):
            deny_entries([str(owned / "nvidia0")])
        os.chown(owned, 0, 0)
    os.chmod(owned, 0o777)  # writable by others, not sticky
    assert "writable by others" in (untrusted(str(owned / "nvidia0")) or "")
