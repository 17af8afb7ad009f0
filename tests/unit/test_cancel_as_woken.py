"""A loop that waits on an event ends when cancelled in the turn the event fires.

On Python 3.11, `asyncio.wait_for(event.wait(), t)` swallows a cancellation that arrives
as the event is set: the loop around it goes on, the stop that cancelled it waits for it
for ever, and a controller asked to stop (SIGTERM, an upgrade's stop) never exits. The
loops wait with `asyncio.timeout` instead; these tests cancel them in exactly that turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from xce.config.settings import ControllerSettings
from xce.controller.service import ControllerService
from xce.server.main import _scheduler_loop
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore


async def ends_when_cancelled(task: asyncio.Task[None], wake: asyncio.Event) -> bool:
    """Cancel `task` in the same turn as `wake` is set; whether it then ended cancelled."""
    await asyncio.sleep(0.2)  # the loop is waiting on its event
    wake.set()
    task.cancel()  # the stop, in the same turn
    done, _ = await asyncio.wait({task}, timeout=10)
    if not done:  # swallowed: the loop went on; end it for good so the test can finish
        task.cancel()
        await asyncio.wait({task}, timeout=10)
    return task in done and task.cancelled()


async def test_the_checkpoint_loop_ends_when_stopped_as_a_checkpoint_is_wanted(
    tmp_path: Path,
) -> None:
    store = DurableLog.open(tmp_path, StoreSettings(checkpoint_interval_s=60.0))
    try:
        task = asyncio.create_task(store.run_checkpoints(store.recovered.state))
        assert await ends_when_cancelled(task, store.wanted)
    finally:
        await store.writer.close()


async def test_the_scheduler_loop_ends_when_stopped_as_a_pass_is_needed(tmp_path: Path) -> None:
    store = DurableLog.open(tmp_path / "state", StoreSettings())
    files = FileStore(tmp_path / "files", 1 << 20)
    try:
        service = ControllerService(
            ControllerSettings(state_dir=tmp_path / "state", schedule_interval_s=60.0),
            files,
            state=store.recovered.state,
            log=store,
        )
        service.schedule_needed.clear()  # so the loop waits at once
        task = asyncio.create_task(_scheduler_loop(service))
        assert await ends_when_cancelled(task, service.schedule_needed)
    finally:
        files.close()
        await store.writer.close()
