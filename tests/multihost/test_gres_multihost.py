"""GPUs on multi-host jobs: `--gpus N` is N on every host of the job.

The scheduler places a spreading job only where each chosen host has N free devices, the
grant names each host's ids in the allocation (`HostSlots.devices`), the core refuses a
grant of a missing or held device on any host, a replay keeps every host's grant, and each
host that is not the first gets its own ids in its share assignment.
"""

from __future__ import annotations

import pytest

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.errors import Conflict, InvalidRequest
from xce.core.model import HostSlots, JobState
from xce.core.state import ClusterState
from xce.wire.codec import decode_entry, encode_entry

GPUS = (("gpu", "0,1"),)


def _state() -> ClusterState:
    state = new_state()
    for name in ("n1", "n2"):
        state.apply(ev.HostRegistered(T0, name, 4, 1000, (), GPUS))
    return state


def _grant(first: str = "gpu:0", other: str = "gpu:1") -> tuple[HostSlots, ...]:
    return (HostSlots("n1", 4, (first,)), HostSlots("n2", 4, (other,)))


def test_each_host_holds_its_own_devices_and_frees_them() -> None:
    state = _state()
    job = submit(state, slots=8, resources="span[ptile=4]", gres=(("gpu", "1"),))
    state.apply(ev.JobStarted(T0, job, "n1", ("gpu:0",), _grant()))
    assert state.host_load["n1"].devices == frozenset({"gpu:0"})
    assert state.host_load["n2"].devices == frozenset({"gpu:1"})
    assert [p.devices for p in state.jobs[job].hosts] == [("gpu:0",), ("gpu:1",)]
    state.apply(ev.JobFinished(T0 + 5, job, 0, 0))
    assert state.host_load == {}


def test_a_missing_or_held_device_on_another_host_is_refused() -> None:
    state = _state()
    job = submit(state, slots=8, resources="span[ptile=4]", gres=(("gpu", "1"),))
    with pytest.raises(InvalidRequest, match="host n2 has no device gpu:7"):
        state.apply(ev.JobStarted(T0, job, "n1", ("gpu:0",), _grant(other="gpu:7")))
    assert state.jobs[job].state is JobState.PEND and state.host_load == {}
    single = submit(state, slots=1, gres=(("gpu", "1"),))
    state.apply(ev.JobStarted(T0, single, "n2", ("gpu:1",)))
    with pytest.raises(Conflict, match="device gpu:1 of host n2 is in use"):
        state.apply(ev.JobStarted(T0, job, "n1", ("gpu:0",), _grant()))
    assert state.jobs[job].state is JobState.PEND


def test_replay_keeps_every_hosts_grant() -> None:
    state = _state()
    job = submit(state, slots=8, resources="span[ptile=4]", gres=(("gpu", "1"),))
    started = ev.JobStarted(T0, job, "n1", ("gpu:0",), _grant())
    state.apply(started)
    again = _state()
    submit(again, slots=8, resources="span[ptile=4]", gres=(("gpu", "1"),))
    decoded = decode_entry(encode_entry(1, 1, started))[2]
    assert decoded == started
    again.apply(decoded)
    assert again.jobs[job].hosts == state.jobs[job].hosts
    assert again.host_load == state.host_load


async def _service(tmp_path):  # type: ignore[no-untyped-def]
    from xce.config.settings import ControllerSettings
    from xce.controller.service import ControllerService
    from xce.controller.workers import WorkerGateway
    from xce.core.model import QueueRecord
    from xce.store.files import FileStore

    settings = ControllerSettings(state_dir=tmp_path, queues=(QueueRecord("normal"),))
    svc = ControllerService(settings, FileStore(tmp_path / "f", 1 << 20))
    await svc.commit([ev.QueueCreated(0.0, settings.queues[0])])
    return svc, WorkerGateway(svc)


async def test_the_scheduler_grants_n_per_host_and_a_third_job_waits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from xce.controller.requests import SubmitRequest, WorkerInfo
    from xce.controller.workers import share_assignment

    svc, gateway = await _service(tmp_path)
    await gateway.register(WorkerInfo("n1", 4, 1000, gres=GPUS))
    await gateway.register(WorkerInfo("n2", 4, 1000, gres=(("gpu", "0"),)))
    first = await svc.submit(
        SubmitRequest.from_fields(
            user="alice", command="x", slots=4, resources="span[ptile=2]", gres={"gpu": 1}
        )
    )
    assert await svc.schedule_once() == 1
    record = svc.state.jobs[first]
    assert [(p.host, p.devices) for p in record.hosts] == [("n1", ("gpu:0",)), ("n2", ("gpu:0",))]
    assert record.devices == ("gpu:0",)
    assert share_assignment(record, "n2")["devices"] == ["gpu:0"]
    # n2's only GPU is held: a second 2-host GPU job waits, a 1-host one fits on n1
    second = await svc.submit(
        SubmitRequest.from_fields(
            user="alice", command="x", slots=4, resources="span[ptile=2]", gres={"gpu": 1}
        )
    )
    third = await svc.submit(
        SubmitRequest.from_fields(user="alice", command="x", slots=1, gres={"gpu": 1})
    )
    assert await svc.schedule_once() == 1
    assert svc.state.jobs[second].state is JobState.PEND
    assert svc.state.jobs[third].devices == ("gpu:1",)
    # more GPUs per host than a host has is refused at submit, naming the count
    with pytest.raises(InvalidRequest, match="asks for 3 gpu devices on one host"):
        await svc.submit(
            SubmitRequest.from_fields(
                user="alice", command="x", slots=4, resources="span[ptile=2]", gres={"gpu": 3}
            )
        )


def test_a_checkpoint_keeps_every_hosts_grant_and_the_load() -> None:
    from xce.wire.plain import pack_records, unpack_records

    state = _state()
    job = submit(state, slots=8, resources="span[ptile=4]", gres=(("gpu", "1"),))
    state.apply(ev.JobStarted(T0, job, "n1", ("gpu:0",), _grant()))
    jobs = unpack_records(type(state.jobs[job]), pack_records(list(state.jobs.values())))
    restored = ClusterState.restore(
        jobs, [], list(state.queues.values()), list(state.hosts.values()), state.next_number
    )
    assert restored.jobs[job].allocation == _grant()
    assert restored.host_load == state.host_load
    assert restored.host_load["n2"].devices == frozenset({"gpu:1"})


def test_the_console_job_detail_shows_each_hosts_devices() -> None:
    from types import SimpleNamespace

    from xce.console.screens.job_detail import JobDetailScreen

    shown = JobDetailScreen._fields(
        SimpleNamespace(job_id="7"),
        {  # type: ignore[arg-type]
            "id": "7",
            "host": "n1",
            "exec_host": "1*n1:1*n2",
            "hosts": [
                {"host": "n1", "slots": 1, "devices": ["gpu:0"]},
                {"host": "n2", "slots": 1, "devices": ["gpu:1"]},
            ],
        },
    )
    assert "  devices      n1=gpu:0 n2=gpu:1" in shown.splitlines(), shown
