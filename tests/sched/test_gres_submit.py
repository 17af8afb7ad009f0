"""GRES and licenses through the service: validated at submit, granted by `schedule_once`
into the JobStarted event, and read from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config.loader import parse_config
from xce.controller.requests import SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.errors import ConfigError, InvalidRequest
from xce.core.model import QueueRecord
from xce.store.files import FileStore


async def service(tmp_path: Path, licenses: tuple[tuple[str, int], ...] = ()) -> ControllerService:
    from xce.config.settings import ControllerSettings

    settings = ControllerSettings(
        state_dir=tmp_path, queues=(QueueRecord("normal"),), licenses=licenses
    )
    svc = ControllerService(settings, FileStore(tmp_path / "f", 1 << 20))
    await svc.commit([ev.QueueCreated(0.0, settings.queues[0])])
    gateway = WorkerGateway(svc)
    await gateway.register(WorkerInfo("g1", 8, 4000, (), gres=(("gpu", "0,1"),)))
    await gateway.register(WorkerInfo("c1", 8, 4000))
    return svc


def job(**kw: object) -> SubmitRequest:
    return SubmitRequest.from_fields(user="alice", command="x", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (
            job(gres={"fpga": 1}),
            "gres 'fpga': no host of queue 'normal' has fpga devices "
            r"\(host devices: gpu",
        ),
        (job(gres={"gpu": 3}), "asks for 3 gpu devices on one host; the most any host"),
        (job(resources="rusage[gpu=3]"), "asks for 3 gpu devices"),
        (job(resources="rusage[gpu=0.5]"), "whole number"),
        (job(gres={"GPU": 1}), "not valid"),
        # hostile names and counts, also where defer skips the hosts' side
        (job(gres={"gpu\n": 1}, defer=True), "not valid"),
        (job(gres={"gpu\x00": 1}, defer=True), "not valid"),
        (job(gres={"gp\u00fc": 1}, defer=True), "not valid"),
        (job(gres={"gpu": 2**63}, defer=True), "between 0 and"),
        (job(gres={"gpu": -1}, defer=True), "between 0 and"),
        (job(gres={"gpu": True}, defer=True), "whole number"),
        (job(licenses={"matlab\n": 1}), "not valid"),
        (job(gres={"gpu": 1}, resources="rusage[gpu=2]"), "asked twice"),
        (job(licenses={"matlab": 1}), "license 'matlab' is not counted"),
    ],
)
async def test_impossible_requests_are_refused_naming_the_resource(
    req: SubmitRequest, message: str, tmp_path: Path
) -> None:
    svc = await service(tmp_path)
    with pytest.raises(InvalidRequest, match=message):
        await svc.submit(req)


async def test_grants_go_into_the_started_event_and_a_third_waits(tmp_path: Path) -> None:
    svc = await service(tmp_path, licenses=(("matlab", 10),))
    a = await svc.submit(job(gres={"gpu": 1}, licenses={"matlab": 1}))
    b = await svc.submit(job(resources="rusage[gpu=1]"))
    c = await svc.submit(job(gres={"gpu": 1}))
    assert await svc.schedule_once() == 2
    assert {svc.state.job(a).devices, svc.state.job(b).devices} == {("gpu:0",), ("gpu:1",)}
    assert svc.state.job(a).host == "g1" and svc.state.job(a).spec.licenses == (("matlab", "1"),)
    assert "gpu" in svc.reasons[c]
    with pytest.raises(InvalidRequest, match="has 10"):
        await svc.submit(job(licenses={"matlab": 11}))
    # deferred: kinds no host has yet are kept for hosts to come
    d = await svc.submit(job(gres={"fpga": 1}, defer=True))
    assert svc.state.job(d).spec.gres == (("fpga", "1"),)


def test_config_reads_worker_gres_and_licenses() -> None:
    cfg = parse_config(
        {
            "worker": {"gres": {"gpu": ["0", 1]}, "gpu_device_path": "/x/n{}"},
            "license": [{"name": "matlab", "count": 10}],
        }
    )
    assert cfg.worker.gres == {"gpu": ("0", "1")}
    assert cfg.worker.gpu_device_path == "/x/n{}"
    assert cfg.controller.licenses == (("matlab", 10),)
    assert parse_config({}).worker.gres is None
    for bad, message in [
        ({"worker": {"gres": {"gpu": "0"}}}, "worker.gres.gpu must be a list"),
        ({"worker": {"gres": {"gpu": ["0", "0"]}}}, "listed twice"),
        ({"license": [{"name": "m", "count": -1}]}, r"license\[0\].count"),
        ({"license": [{"name": "m", "count": 1}, {"name": "m", "count": 2}]}, "twice"),
        ({"worker": {"gpu_device_path": "/dev/nvidia"}}, "must contain"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config(bad)


def test_script_directives_ask_gpus_and_the_command_line_wins(tmp_path: Path) -> None:
    from xce.cli import submitting

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gres=gpu:a100:2\n#BSUB -n 2\nnvidia-smi\n")
    given = {**submitting.DEFAULTS}
    body, _ = submitting.build([str(script)], None, [], given, False, set())
    assert body["gpus"] == 2 and "gpu" not in body["resources"]
    body, _ = submitting.build([str(script)], None, [], {**given, "gpus": 1}, False, {"gpus"})
    assert body["gpus"] == 1
    assert submitting.gres_options(1, "fpga:1", "matlab:2") == {
        "gres": {"fpga": 1, "gpu": 1},
        "licenses": {"matlab": 2},
    }


def test_the_console_hosts_table_shows_free_of_total_devices() -> None:
    from xce.console.screens.hosts import host_cells

    host = {
        "name": "g1",
        "status": "online",
        "admin": "open",
        "slots": 8,
        "slots_used": 1,
        "memory_mb": 1024,
        "memory_used_mb": 0,
        "attributes": {"gpu_model": "H200"},
        "gres": {"gpu": {"total": 2, "free": 1, "devices": ["0", "1"], "used": ["0"]}},
    }
    assert host_cells(host)[-1] == "gpu_model=H200 gpu:1/2 free"
    assert host_cells({**host, "gres": {}})[-1] == "gpu_model=H200"
