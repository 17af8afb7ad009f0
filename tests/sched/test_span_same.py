"""span[hosts=1] and a ptile/block covering the whole job stay on one host, same[] holds on
one host; a narrower ptile spreads the job (tests/multihost), and spans that make
no sense are refused at submit with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config.settings import ControllerSettings
from xce.controller.requests import SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.errors import InvalidRequest
from xce.core.model import QueueRecord
from xce.store.files import FileStore


async def service(tmp_path: Path) -> ControllerService:
    settings = ControllerSettings(state_dir=tmp_path, queues=(QueueRecord("normal"),))
    svc = ControllerService(settings, FileStore(tmp_path / "f", 1 << 20))
    await svc.commit([ev.QueueCreated(0.0, settings.queues[0])])
    return svc


@pytest.mark.parametrize(
    "resources", ["span[hosts=1]", "span[ptile=4]", "span[block=8]", "same[rack] span[hosts=1]"]
)
async def test_single_host_spans_are_placed_on_one_host(resources: str, tmp_path: Path) -> None:
    svc = await service(tmp_path)
    gateway = WorkerGateway(svc)
    await gateway.register(WorkerInfo("a", 2, 1000, (("rack", "r1"),)))
    await gateway.register(WorkerInfo("b", 4, 1000, (("rack", "r2"),)))
    job = await svc.submit(
        SubmitRequest.from_fields(user="alice", command="x", slots=4, resources=resources)
    )
    assert await svc.schedule_once() == 1
    assert svc.state.job(job).host == "b"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("span[hosts=2]", r"only span\[hosts=1\] is supported at column 12"),
        ("span[block=3]", r"span\[block=3\] needs a slot count that is a multiple of 3, not 4"),
    ],
)
async def test_multi_host_spans_are_refused(resources: str, message: str, tmp_path: Path) -> None:
    svc = await service(tmp_path)
    with pytest.raises(InvalidRequest, match=message):
        await svc.submit(
            SubmitRequest.from_fields(user="alice", command="x", slots=4, resources=resources)
        )
