"""Multi-host allocations in the core: every host holds its share, the record
keeps the allocation, a single-host job and an old WAL/checkpoint mean what they meant."""

from __future__ import annotations

import pytest

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.allocation import exec_host, hostfile_text, job_environment
from xce.core.errors import InvalidRequest
from xce.core.model import HostLoad, HostSlots, JobState
from xce.core.state import ClusterState
from xce.wire.codec import decode_entry, encode_entry

HOSTS = {"n1": (4, 1000), "n2": (4, 1000), "n3": (4, 1000)}
SPREAD = (HostSlots("n1", 2), HostSlots("n2", 2), HostSlots("n3", 2))


def test_each_host_holds_its_share_and_frees_it_at_the_end() -> None:
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6, memory_mb=300, resources="span[ptile=2]")
    state.apply(ev.JobStarted(T0, job, "n1", hosts=SPREAD))
    record = state.jobs[job]
    assert record.host == "n1" and record.hosts == SPREAD
    for name in HOSTS:
        assert state.host_load[name] == HostLoad(2, 300, frozenset({job}))
        assert job in state.jobs_on(name)
    assert exec_host(record) == "2*n1:2*n2:2*n3"
    state.apply(ev.JobFinished(T0 + 5, job, 0, 0))
    assert state.host_load == {}
    assert state.jobs[job].hosts == SPREAD  # kept for views and accounting


def test_memory_per_slot_is_charged_per_host_share() -> None:
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=3, memory_mb=300, mem_per_slot_mb=100)
    state.apply(ev.JobStarted(T0, job, "n1", hosts=(HostSlots("n1", 2), HostSlots("n2", 1))))
    assert state.host_load["n1"].memory_mb == 200
    assert state.host_load["n2"].memory_mb == 100


def test_a_lost_second_host_is_named_and_the_requeue_frees_every_host() -> None:
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6, resources="span[ptile=2]")
    state.apply(ev.JobStarted(T0, job, "n1", hosts=SPREAD))
    state.apply(ev.JobHostLost(T0 + 1, job, True, "n3"))
    record = state.jobs[job]
    assert record.state is JobState.PEND and record.reason == "host n3 became unavailable"
    assert record.allocation == () and state.host_load == {}


@pytest.mark.parametrize(
    "hosts",
    [
        (HostSlots("n2", 3), HostSlots("n1", 3)),  # does not start at the named host
        (HostSlots("n1", 3), HostSlots("n1", 3)),  # a host twice
        (HostSlots("n1", 2), HostSlots("n2", 2)),  # too few slots
    ],
)
def test_a_bad_allocation_is_refused_and_changes_nothing(hosts: tuple[HostSlots, ...]) -> None:
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6)
    with pytest.raises(InvalidRequest):
        state.apply(ev.JobStarted(T0, job, "n1", hosts=hosts))
    assert state.jobs[job].state is JobState.PEND and state.host_load == {}


def test_an_old_job_started_record_means_one_host() -> None:
    """A JobStarted written before `hosts` was appended (its bytes lack the field) decodes
    with no hosts and the job holds all its slots on its one host."""
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=3, memory_mb=50)
    _, _, event = decode_entry(encode_entry(1, 1, ev.JobStarted(T0, job, "n2")))
    assert event.hosts == ()
    state.apply(event)
    assert state.jobs[job].hosts == (HostSlots("n2", 3),)
    assert state.host_load["n2"] == HostLoad(3, 50, frozenset({job}))
    assert exec_host(state.jobs[job]) == "3*n2"


def test_checkpoint_round_trip_keeps_allocation_and_load() -> None:
    from xce.wire.plain import pack_records, unpack_records

    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6, resources="span[ptile=2]")
    state.apply(ev.JobStarted(T0, job, "n1", hosts=SPREAD))
    jobs = unpack_records(type(state.jobs[job]), pack_records(list(state.jobs.values())))
    restored = ClusterState.restore(
        jobs, [], list(state.queues.values()), list(state.hosts.values()), state.next_number
    )
    assert restored.jobs[job].allocation == SPREAD
    assert restored.host_load == state.host_load


def test_the_environment_and_hostfile() -> None:
    env = job_environment(SPREAD)
    assert env == {
        "XCE_HOSTS": "n1 n1 n2 n2 n3 n3",
        "XCE_NODELIST": "n1,n2,n3",
        "XCE_NUM_HOSTS": "3",
        "XCE_SLOTS": "6",
    }
    assert hostfile_text(SPREAD) == "n1 2\nn2 2\nn3 2\n"


# --- through the controller service: submit rules, a pass, the first host's assignment ----


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


async def test_a_ptile_job_is_placed_on_three_hosts_and_only_the_first_runs_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from xce.controller.requests import SubmitRequest, WorkerInfo

    svc, gateway = await _service(tmp_path)
    for name in ("n1", "n2", "n3"):
        await gateway.register(WorkerInfo(name, 4, 1000))
    job = await svc.submit(
        SubmitRequest.from_fields(user="alice", command="x", slots=6, resources="span[ptile=2]")
    )
    assert await svc.schedule_once() == 1
    assert svc.state.jobs[job].hosts == SPREAD
    (first,) = gateway.assignments("n1")["jobs"]
    assert first["hosts"] == [["n1", 2], ["n2", 2], ["n3", 2]]
    assert gateway.assignments("n2")["jobs"] == []  # held there, started on n1 only
    assert gateway._host_lost(0.0, svc.state.jobs[job], "n2") == ev.JobHostLost(
        0.0, job, True, "n2"
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            dict(slots=16, resources="span[ptile=2]"),
            r"no set of hosts of queue 'normal' can ever hold this job \(16 slots; its hosts "
            r"have 12 slots in all\)",
        ),
        (dict(slots=4, memory_mb=10, mem_per_slot_mb=5), "not both"),
        (dict(slots=13), "no set of hosts"),
    ],
)
async def test_impossible_multi_host_jobs_are_refused(kw, message, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from xce.controller.requests import SubmitRequest, WorkerInfo

    svc, gateway = await _service(tmp_path)
    for name in ("n1", "n2", "n3"):
        await gateway.register(WorkerInfo(name, 4, 1000))
    with pytest.raises(InvalidRequest, match=message):
        await svc.submit(SubmitRequest.from_fields(user="alice", command="x", **kw))
    wide = await svc.submit(SubmitRequest.from_fields(user="alice", command="x", slots=12))
    per_slot = await svc.submit(
        SubmitRequest.from_fields(user="alice", command="x", slots=2, mem_per_slot_mb=100)
    )
    assert svc.state.jobs[per_slot].spec.memory_mb == 200
    assert await svc.schedule_once() == 1  # the 12-slot job (no span) fills every host
    assert [p.slots for p in svc.state.jobs[wide].hosts] == [4, 4, 4]


def test_views_and_accounting_list_every_host() -> None:
    from xce.accounting.record import build
    from xce.api.views import job_view

    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6, resources="span[ptile=2]")
    state.apply(ev.JobStarted(T0, job, "n1", hosts=SPREAD))
    view = job_view(state.jobs[job], {}, T0 + 1, full=True)
    assert view["exec_host"] == "2*n1:2*n2:2*n3"
    assert view["hosts"] == [
        {"host": "n1", "slots": 2},
        {"host": "n2", "slots": 2},
        {"host": "n3", "slots": 2},
    ]
    record = build(state.jobs[job], "DONE", T0 + 5, "", 9)
    assert record.host == "n1" and record.hosts == "n1:2,n2:2,n3:2"
    single = submit(state, slots=1)
    state.apply(ev.JobStarted(T0, single, "n1"))
    assert job_view(state.jobs[single], {}, T0, True)["exec_host"] == "n1"
    assert build(state.jobs[single], "DONE", T0 + 5, "", 9).hosts == "n1:1"


def test_the_console_job_detail_lists_every_host() -> None:
    from types import SimpleNamespace

    from xce.console.screens.job_detail import JobDetailScreen

    shown = JobDetailScreen._fields(
        SimpleNamespace(job_id="7"),
        {  # type: ignore[arg-type]
            "id": "7",
            "host": "n1",
            "exec_host": "2*n1:2*n2",
            "hosts": [{"host": "n1", "slots": 2}, {"host": "n2", "slots": 2}],
        },
    )
    assert "  exec_host    2*n1:2*n2" in shown.splitlines()
    single = JobDetailScreen._fields(
        SimpleNamespace(job_id="8"),
        {  # type: ignore[arg-type]
            "id": "8",
            "host": "n1",
            "exec_host": "n1",
            "hosts": [{"host": "n1", "slots": 1}],
        },
    )
    assert "exec_host" not in single  # one host: the host line says it all


def test_the_event_stream_names_every_host_of_a_started_job() -> None:
    from xce.controller.bus import EventBus

    state = new_state(hosts=HOSTS)
    job = submit(state, slots=6, resources="span[ptile=2]")
    started = ev.JobStarted(T0, job, "n1", hosts=SPREAD)
    state.apply(started)
    bus = EventBus(state)
    keys = bus._keys(started)
    assert [k[1] for k in keys if k[0] == "host"] == ["n1", "n2", "n3"]


async def test_job_modify_may_spread_a_pending_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from xce.controller.requests import SubmitRequest, WorkerInfo

    svc, gateway = await _service(tmp_path)
    for name in ("n1", "n2", "n3"):
        await gateway.register(WorkerInfo(name, 4, 1000))
    job = await svc.submit(SubmitRequest.from_fields(user="alice", command="x", slots=2, hold=True))
    await svc.modify_job(job, {"slots": 6, "resources": "span[ptile=2]"}, True)
    with pytest.raises(InvalidRequest, match="no set of hosts"):
        await svc.modify_job(job, {"slots": 16}, True)
    with pytest.raises(InvalidRequest, match=r"span\[block=4\] needs"):
        await svc.modify_job(job, {"resources": "span[block=4]"}, True)
    await svc.modify_job(job, {"hold": False}, True)
    assert await svc.schedule_once() == 1
    assert svc.state.jobs[job].hosts == SPREAD
