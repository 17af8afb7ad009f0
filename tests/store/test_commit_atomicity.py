"""A commit is all or nothing: an event the log cannot encode, or one that does not apply,
fails before anything of its batch changes the state, the WAL or the notifications."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config.settings import ControllerSettings
from xce.controller.requests import SubmitRequest
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.errors import InvalidRequest, NotFound
from xce.core.model import JobSpec, JobState, QueueRecord
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.recovery import recover
from xce.wire.codec import WireError


async def test_unencodable_submit_changes_nothing_and_restart_works(tmp_path: Path) -> None:
    store = DurableLog.open(tmp_path, StoreSettings(segment_bytes=64 * 1024))
    service = ControllerService(
        ControllerSettings(state_dir=tmp_path),
        FileStore(tmp_path / "files", 1 << 20),
        state=store.recovered.state,
        log=store,
    )
    await service.commit([ev.QueueCreated(0, QueueRecord("normal"))])
    with pytest.raises(InvalidRequest):  # a submit refuses such text before anything
        await service.submit(SubmitRequest.from_fields(user="alice", command="echo", name="\ud800"))
    spec = JobSpec(user="alice", queue="normal", command="echo", name="\ud800")
    with pytest.raises(WireError):  # and commit refuses an event the log cannot encode
        await service.commit([ev.JobSubmitted(0, 1, spec)])
    assert service.state.next_number == 1 and not service.state.jobs
    assert await service.submit(SubmitRequest.from_fields(user="alice", command="echo ok")) == "1"
    await store.writer.close()
    assert set(recover(tmp_path).state.jobs) == {"1"}


async def test_a_batch_with_a_bad_second_event_changes_nothing(tmp_path: Path) -> None:
    """Event 2 of 3 does not apply: the state, the WAL, the host wake-ups, the listeners and
    the committed hooks see nothing of the batch; the next good batch goes through whole."""
    store = DurableLog.open(tmp_path, StoreSettings(segment_bytes=64 * 1024))
    service = ControllerService(
        ControllerSettings(state_dir=tmp_path),
        FileStore(tmp_path / "files", 1 << 20),
        state=store.recovered.state,
        log=store,
    )
    await service.commit(
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 8, 1000)]
    )
    first = await service.submit(SubmitRequest.from_fields(user="alice", command="true"))
    heard: list[ev.Event] = []
    batches: list[list[ev.Event]] = []
    service.listeners.append(heard.append)
    service.committed.append(batches.append)
    versions = dict(service.host_versions)
    seq = store.writer.next_seq
    jobs = dict(service.state.jobs)
    service.schedule_needed.clear()
    bad = [ev.JobStarted(5, first, "h1"), ev.JobStarted(5, "99", "h1"), ev.JobSuspended(5, first)]
    with pytest.raises(NotFound):
        await service.commit(bad)
    assert service.state.jobs == jobs and service.state.host_load == {}
    assert service.state.pending == {first: None}
    assert store.writer.next_seq == seq and not store.writer._buffer
    assert heard == [] and batches == [] and service.host_versions == versions
    assert not service.schedule_needed.is_set()
    good = [ev.JobStarted(6, first, "h1"), ev.JobSuspended(6, first)]
    await service.commit(good)
    assert service.state.jobs[first].state is JobState.USUSP
    assert heard == good and batches == [good]
    assert service.host_versions["h1"] == versions.get("h1", 0) + 1
    assert store.writer.durable_seq == seq + 1
    await store.writer.close()
    again = recover(tmp_path).state
    assert again.jobs == service.state.jobs and again.host_load == service.state.host_load
