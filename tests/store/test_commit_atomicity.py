"""An event the log cannot encode must fail before it changes the state."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config import ControllerSettings
from xce.controller.requests import SubmitRequest
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.recovery import recover
from xce.wire.codec import WireError


async def test_unencodable_submit_changes_nothing_and_restart_works(tmp_path: Path) -> None:
    store = DurableLog.open(tmp_path, StoreSettings())
    service = ControllerService(ControllerSettings(state_dir=tmp_path),
                                FileStore(tmp_path / "files", 1 << 20),
                                state=store.recovered.state, log=store)
    await service.commit([ev.QueueCreated(0, QueueRecord("normal"))])
    with pytest.raises(WireError):
        await service.submit(SubmitRequest(user="alice", command="echo", name="\ud800"))
    assert service.state.next_number == 1 and not service.state.jobs
    assert await service.submit(SubmitRequest(user="alice", command="echo ok")) == "1"
    await store.writer.close()
    assert set(recover(tmp_path).state.jobs) == {"1"}
