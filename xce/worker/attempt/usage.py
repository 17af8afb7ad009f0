"""Resource usage of one job attempt, read from its cgroup.

The cgroup sees every process of the job, those that left its session included, and its
memory figure is the job's real high-water mark (memory.peak / max_usage_in_bytes), not the
sum of each process's RSS, which counts shared pages once per process. With the "none"
backend the figures are sampled from /proc (xce/worker/cgroups), a best effort.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xce.worker.cgroups import JobCgroup
from xce.worker.devices.gpu_usage import GpuMeter


@dataclass
class UsageMeter:
    """The maxima over the life of one attempt (what heartbeats and the finish report send)."""

    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0
    # The granted GPUs' figures through NVML where present (xce/worker/devices/gpu_usage.py).
    gpus: GpuMeter = field(default_factory=GpuMeter)

    def sample(self, cgroup: JobCgroup | None) -> None:
        if cgroup is None:
            return
        try:
            usage = cgroup.usage()
        except OSError:
            return  # removed under us (the job just ended): the keeper's figures follow
        self.cpu_user_s = max(self.cpu_user_s, usage.cpu_user_s)
        self.cpu_system_s = max(self.cpu_system_s, usage.cpu_system_s)
        self.max_rss_bytes = max(self.max_rss_bytes, usage.memory_peak_bytes)

    def close(self, result: dict[str, Any]) -> None:
        """Fold in the keeper's final figures (taken from the cgroup just before removal)."""
        self.cpu_user_s = max(self.cpu_user_s, float(result.get("cpu_user_s") or 0.0))
        self.cpu_system_s = max(self.cpu_system_s, float(result.get("cpu_system_s") or 0.0))
        self.max_rss_bytes = max(self.max_rss_bytes, int(result.get("max_rss_bytes") or 0))
