"""A worker's devices: what it declares, what it detects, and how a job is bound to its own.

Declared: `[worker.gres]` (`gpu = ["0", "1"]`, any other kind likewise). Detected: when that
table has no `gpu` key, GPUs are read through NVML (`nvidia-ml-py`, module `pynvml`): their
indexes become the ids and the first GPU's model and memory become host attributes
(`gpu_model`, `gpu_memory_mb`, so `select[gpu_model=="H200"]` works); without the library
or a driver the host simply has no GPUs, said in one log line.

Binding: a job granted GPUs gets `CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES` and
`XCE_GPUS` naming exactly them; a job on a GPU host granted none gets them empty (CUDA then
sees no device). With the cgroup v1 and v2 backends the other GPUs' device nodes are denied
to the job (v1's devices.deny, xce/worker/cgroups/devices.py; v2's eBPF device program,
xce/worker/cgroups/devbpf.py), so it cannot open them even by unsetting the variables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xce.core import gres

log = logging.getLogger("xce.worker.gpus")

GPU = "gpu"
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "XCE_GPUS")


@dataclass(frozen=True)
class HostDevices:
    """What the worker registers and binds: devices by kind, extra attributes, GPU nodes."""

    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)
    source: str = "config"  # "config", "nvml" or "none"
    gpu_device_path: str = "/dev/nvidia{}"
    # GPU id -> its device node, where known better than the pattern: NVML's index is not
    # the node's minor number (/dev/nvidia<minor>), so detected GPUs name their nodes here.
    nodes: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        return self.devices.get(GPU, ())

    def gpu_node(self, device: str) -> str:
        node = self.nodes.get(device)
        return node if node is not None else self.gpu_device_path.replace("{}", device)


def detect_nvml() -> tuple[tuple[str, ...], dict[str, str], dict[str, int]] | None:
    """(GPU indexes, attributes, index -> device minor number) from NVML, or None when the
    library or a driver is absent. The minor number names the GPU's node, /dev/nvidia<minor>:
    NVML orders its indexes by PCI bus id, the driver numbers the nodes as it probes, and the
    two need not agree (Slurm's NVML autodetection reads the minor number too)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        log.info("no GPUs: nvidia-ml-py is not installed (declare devices in [worker.gres])")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("no GPUs: NVML is not available (%s); declare devices in [worker.gres]", exc)
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        attrs: dict[str, str] = {}
        minors = {
            str(i): int(pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        }
        if count:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            attrs["gpu_model"] = model_name(pynvml.nvmlDeviceGetName(handle))
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            attrs["gpu_memory_mb"] = str(int(memory) // 2**20)
        return tuple(str(i) for i in range(count)), attrs, minors
    finally:
        pynvml.nvmlShutdown()


def model_name(raw: str | bytes) -> str:
    """NVML's name ("NVIDIA H200") as a model attribute ("H200"): what sites write in
    select[], like Slurm's gres Type."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    words = [w for w in text.split() if w.upper() not in ("NVIDIA", "TESLA")]
    return "-".join(words) or text.strip()


def host_devices(
    configured: Mapping[str, tuple[str, ...]] | None, gpu_device_path: str = "/dev/nvidia{}"
) -> HostDevices:
    """The host's devices: the configured table, with GPUs detected when it has no gpu key."""
    devices = dict(configured or {})
    if GPU in devices:
        return HostDevices(devices, {}, "config", gpu_device_path)
    found = detect_nvml()
    if found is None or not found[0]:
        return HostDevices(devices, {}, "none" if not devices else "config", gpu_device_path)
    devices[GPU] = found[0]
    log.info("GPUs from NVML: %s (%s)", ",".join(found[0]), found[1].get("gpu_model", "?"))
    nodes = {i: gpu_device_path.replace("{}", str(minor)) for i, minor in found[2].items()}
    return HostDevices(devices, found[1], "nvml", gpu_device_path, nodes)


def job_env(granted: Sequence[str], host: HostDevices) -> dict[str, str]:
    """The variables binding a job to its granted GPUs (none on a host without GPUs):
    `granted` is its assignment's (or share's) `devices` ("gpu:0", ...)."""
    mine = gres.granted(granted, GPU)
    if not mine and not host.gpus:
        return {}
    value = ",".join(mine)
    return {name: value for name in ENV_NAMES}


def denied_nodes(granted: Sequence[str], host: HostDevices) -> list[str]:
    """The device nodes of the host's GPUs this job was not granted (`granted`: its
    assignment's or share's `devices`)."""
    mine = set(gres.granted(granted, GPU))
    return [host.gpu_node(d) for d in host.gpus if d not in mine]
