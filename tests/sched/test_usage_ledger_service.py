"""The controller service charges finished jobs to fairshare usage, and a restarted service
(recovered state) starts from the same usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config.scheduler import SchedulerSettings
from xce.config.settings import ControllerSettings
from xce.controller.requests import FinishReport, SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.store.files import FileStore


async def test_finished_jobs_are_charged_and_decay(tmp_path: Path) -> None:
    clock = [1000.0]
    settings = ControllerSettings(
        state_dir=tmp_path,
        queues=(QueueRecord("normal"),),
        scheduler=SchedulerSettings(fairshare_half_life_s=100),
    )
    service = ControllerService(
        settings, FileStore(tmp_path / "f", 1 << 20), clock=lambda: clock[0]
    )
    await service.commit([ev.QueueCreated(clock[0], settings.queues[0])])
    gateway = WorkerGateway(service)
    await gateway.register(WorkerInfo("h", 4, 1000))
    job = await service.submit(SubmitRequest.from_fields(user="alice", command="x", slots=2))
    assert await service.schedule_once() == 1
    clock[0] = 1050.0
    await gateway.finished("h", FinishReport(job, 0, 0))
    assert service.usage.usage(1050.0) == {"alice": 100.0}  # 2 slots x 50 s
    assert service.usage.usage(1150.0)["alice"] == pytest.approx(50.0)  # one half-life
    again = ControllerService(
        settings, FileStore(tmp_path / "f", 1 << 20), state=service.state, clock=lambda: clock[0]
    )
    assert again.usage.usage(1050.0) == {"alice": 100.0}
