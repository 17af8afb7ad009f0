"""GPU usage of a job's granted devices, sampled through NVML where it is present.

The worker samples each running job's GPUs as it samples its cgroup
(xce/worker/attempt/executor.py):
the device's utilisation (NVML's `utilization.gpu`, percent of the last sample period the
GPU was busy) and its used memory. A granted GPU belongs to one job only (the scheduler
never grants it twice and the devices cgroup fences it), so the device's figures are the
job's, as Slurm's gpu accounting (AcctGatherEnergy/gres) reads them per device. The finish
report carries the mean utilisation over the samples and the peak of the job's GPU memory
(summed over its devices). Without `nvidia-ml-py` or a driver nothing is sampled and the
usage says nothing of GPUs (the fields stay 0): never an error.

Device ids are NVML indexes when detected (xce/worker/devices/gpus.py); a configured id that is not
a whole number is not sampled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from xce.core import gres
from xce.worker.devices.gpus import GPU

log = logging.getLogger("xce.worker.gpuusage")


class NvmlReader:
    """One NVML session for the worker's life, opened on first use; `None` readings when
    the library, a driver or a device is absent."""

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._state = "new"  # "new", "open" or "absent"

    def _open(self) -> Any:
        if self._state == "new":
            self._state = "absent"
            try:
                nvml = self._module
                if nvml is None:
                    import pynvml  # nvidia-ml-py

                    nvml = pynvml
                nvml.nvmlInit()
            except Exception as exc:  # ImportError or NVMLError: no GPU figures, said once
                log.info("no GPU usage figures: NVML is not available (%s)", exc)
                return None
            self._module, self._state = nvml, "open"
        return self._module if self._state == "open" else None

    def read(self, index: int) -> tuple[float, int] | None:
        """(utilisation percent, used memory bytes) of GPU `index`, or None."""
        nvml = self._open()
        if nvml is None:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception as exc:  # a GPU fallen off the bus: this sample says nothing
            log.debug("GPU %s: no reading: %s", index, exc)
            return None
        return util, used


@dataclass
class GpuMeter:
    """Mean utilisation and memory peak of one attempt's GPUs over its samples."""

    util_sum: float = 0.0
    samples: int = 0
    mem_peak_bytes: int = 0

    @property
    def util_pct(self) -> float:
        return round(self.util_sum / self.samples, 2) if self.samples else 0.0

    def sample(self, reader: NvmlReader, devices: Iterable[str]) -> None:
        """One reading of every granted GPU: each device's utilisation counts as a sample,
        the job's memory is the sum over its devices at this moment."""
        used = 0
        read_any = False
        for device in gres.granted(devices, GPU):
            if not device.isdigit():
                continue
            got = reader.read(int(device))
            if got is None:
                continue
            read_any = True
            self.util_sum += got[0]
            self.samples += 1
            used += got[1]
        if read_any:
            self.mem_peak_bytes = max(self.mem_peak_bytes, used)

    def report(self) -> dict[str, Any]:
        """The finish report's GPU fields; empty when nothing was read."""
        if not self.samples:
            return {}
        return {"gpu_util_pct": self.util_pct, "gpu_mem_peak_bytes": self.mem_peak_bytes}


READER = NvmlReader()  # the worker's one NVML session (tests pass their own)
