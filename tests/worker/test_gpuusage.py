"""GPU usage through NVML: the granted GPUs' mean utilisation and memory peak,
with a fake `pynvml` (as tests/worker/test_gpus.py does), with the real library on a host
without a driver, and without the library at all: then nothing is read and nothing fails."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from xce.accounting.record import build
from xce.core import events as ev
from xce.core.model import JobState, Usage
from xce.worker.devices.gpu_usage import GpuMeter, NvmlReader


class FakeNvml:
    """Two GPUs; each reading of GPU i returns the next utilisation in its script."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.util = {0: [20.0, 60.0], 1: [100.0, 100.0]}
        self.used = {0: [1 << 30, 3 << 30], 1: [2 << 30, 1 << 30]}
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i not in self.util:
            raise self.NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return type("U", (), {"gpu": self.util[h].pop(0)})()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("M", (), {"used": self.used[h].pop(0)})()


def test_mean_utilisation_and_peak_of_the_granted_gpus_only() -> None:
    nvml = FakeNvml()
    reader, meter = NvmlReader(nvml), GpuMeter()
    for _ in range(2):
        meter.sample(reader, ("gpu:0", "fpga:0", "gpu:x"))  # other kinds and odd ids: skipped
    assert meter.report() == {"gpu_util_pct": 40.0, "gpu_mem_peak_bytes": 3 << 30}
    both = GpuMeter()
    nvml = FakeNvml()
    reader = NvmlReader(nvml)
    both.sample(reader, ("gpu:0", "gpu:1"))
    both.sample(reader, ("gpu:0", "gpu:1"))
    # (20 + 100 + 60 + 100) / 4; memory summed per moment: max(1+2, 3+1) GiB
    assert both.report() == {"gpu_util_pct": 70.0, "gpu_mem_peak_bytes": 4 << 30}
    assert nvml.inits == 1  # one NVML session for the worker's life


def test_a_missing_device_reads_nothing_and_fails_nothing() -> None:
    meter = GpuMeter()
    meter.sample(NvmlReader(FakeNvml()), ("gpu:7",))
    assert meter.report() == {} and meter.samples == 0


def test_without_the_library_nothing_is_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    reader, meter = NvmlReader(), GpuMeter()
    with caplog.at_level("INFO", logger="xce.worker.gpuusage"):
        meter.sample(reader, ("gpu:0",))
        meter.sample(reader, ("gpu:0",))
    assert meter.report() == {}
    assert sum("NVML is not available" in r.getMessage() for r in caplog.records) == 1


def test_the_real_library_without_a_driver_reads_nothing() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a driver is present: bench/gpu_check.py covers the real readings")
    meter = GpuMeter()
    meter.sample(NvmlReader(), ("gpu:0",))
    assert meter.report() == {}


def test_the_figures_reach_the_job_and_its_accounting_record() -> None:
    from tests.unit.helpers import T0, new_state, submit

    state = new_state()
    state.apply(ev.HostRegistered(T0, "g1", 4, 1000, (), (("gpu", "0"),)))
    job = submit(state, gres=(("gpu", "1"),))
    state.apply(ev.JobStarted(T0, job, "g1", ("gpu:0",)))
    usage = Usage(1.0, 0.5, 100, 10.0, 55.5, 3 << 30)
    state.apply(ev.JobFinished(T0 + 10, job, 0, 0, None, usage))
    record = state.jobs[job]
    assert record.state is JobState.DONE and record.usage == usage
    acct = build(record, "DONE", T0 + 10, "", 1)
    assert (acct.gpu_util_pct, acct.gpu_mem_peak_bytes) == (55.5, 3 << 30)
    plain = build(
        dataclasses.replace(record, usage=Usage(1.0, 0.5, 100, 10.0)), "DONE", T0 + 10, "", 1
    )
    assert plain.gpu_util_pct is None and plain.gpu_mem_peak_bytes is None
