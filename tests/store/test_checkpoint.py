"""Checkpoints: equivalence with replay, fallback, pruning, retention."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

from xce.config.settings import ControllerSettings
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.deps import parse_dependency
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.core.state import ClusterState
from xce.store.checkpoint import list_checkpoints
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.recovery import checkpoint_dir, recover, wal_dir
from xce.store.wal.reader import list_segments

SPEC = JobSpec(user="bob", queue="normal", command="sleep 1", walltime_s=60)


def history(start: int, count: int, at: float) -> list[ev.Event]:
    out: list[ev.Event] = []
    for i in range(count):
        n = start + i
        out.append(ev.JobSubmitted(at, n, SPEC))
        if n % 3 == 0:
            out.append(ev.JobStarted(at, str(n), "h1"))
            out.append(ev.JobFinished(at + 1, str(n), 0, 0, None, Usage(1, 2, 3, 4)))
    return out


async def open_store(tmp_path: Path, **kw: object) -> tuple[DurableLog, ClusterState]:
    settings = StoreSettings(segment_bytes=32 * 1024, **kw)  # type: ignore[arg-type]
    store = DurableLog.open(tmp_path, settings)
    return store, store.recovered.state


def retain(store: DurableLog, tmp_path: Path) -> ControllerService:
    """Retention as a primary runs it (controller/main.py): the service commits JobsPurged."""
    service = ControllerService(
        ControllerSettings(state_dir=tmp_path),
        FileStore(tmp_path / "files", 1 << 20),
        state=store.recovered.state,
        log=store,
    )
    store.purge = service.purge_finished
    return service


async def commit(store: DurableLog, state: ClusterState, events: list[ev.Event]) -> None:
    for e in events:
        state.apply(e)
        store.append(e)
    await store.sync()


def same(a: ClusterState, b: ClusterState) -> None:
    assert a.jobs == b.jobs
    assert a.arrays == b.arrays
    assert a.queues == b.queues and a.hosts == b.hosts
    assert a.pending == b.pending and a.host_load == b.host_load
    assert a.pending_arrays == b.pending_arrays and a.array_tasks == b.array_tasks
    assert a.next_number == b.next_number and a.number_ceiling == b.number_ceiling
    # The derived indexes a restore rebuilds in one loop (ClusterState._index_restored).
    assert a.counts == b.counts and a.submit_keys == b.submit_keys
    assert a.finished_jobs == b.finished_jobs and a.waiting_on_deps == b.waiting_on_deps
    assert a.reservations == b.reservations


async def test_checkpoint_plus_wal_equals_live_state(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    await commit(store, state, history(1, 300, at=100.0))
    array = parse_array_spec("1-1000:3%5")
    await commit(
        store,
        state,
        [
            ev.ArraySubmitted(100, 301, SPEC, array.indices, 5),
            ev.JobStarted(101, "301[4]", "h1"),
            ev.JobKilled(101, "301[7]"),
        ],
    )
    waits = replace(SPEC, dependency=parse_dependency("afterok:1"))
    await commit(
        store, state, [ev.JobSubmitted(102, 302, SPEC, "key-1"), ev.JobSubmitted(102, 303, waits)]
    )
    assert state.submit_keys and state.waiting_on_deps and state.finished_jobs
    await store.checkpoint(state, now=200.0)
    await commit(store, state, history(304, 100, at=300.0))
    await store.writer.close()
    got = recover(tmp_path)
    assert got.checkpoint_seq > 0 and got.replayed > 0
    same(got.state, state)


async def test_reserved_job_numbers_survive_a_checkpoint_and_the_wal(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path)
    await commit(
        store,
        state,
        [
            ev.QueueCreated(0, QueueRecord("normal")),
            ev.HostRegistered(0, "h1", 64, 10**6),
            ev.JobNumbersReserved(0, 1, 100),
        ],
    )
    await commit(store, state, history(1, 10, at=100.0))
    await store.checkpoint(state, now=200.0)
    assert recover(tmp_path).state.number_ceiling == 100  # from the checkpoint alone
    await commit(store, state, [ev.JobNumbersReserved(0, 101, 200)])  # skips 11..100
    await commit(store, state, history(101, 5, at=300.0))
    await store.writer.close()
    got = recover(tmp_path)
    same(got.state, state)
    assert (got.state.next_number, got.state.number_ceiling) == (106, 200)


async def test_keeps_two_checkpoints_and_prunes_wal(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    number = 1
    for _ in range(4):
        await commit(store, state, history(number, 200, at=100.0))
        number += 200
        await store.checkpoint(state, now=150.0)
    kept = list_checkpoints(checkpoint_dir(tmp_path))
    assert len(kept) == 2
    first_wal = list_segments(wal_dir(tmp_path))[0][0]
    assert first_wal <= kept[-1][0] + 1, "the WAL must still cover the older checkpoint"
    assert first_wal > 1, "segments wholly before the older checkpoint are deleted"
    await store.writer.close()
    same(recover(tmp_path).state, state)


async def test_damaged_newest_checkpoint_falls_back(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    await commit(store, state, history(1, 100, at=100.0))
    await store.checkpoint(state, now=150.0)
    await commit(store, state, history(101, 100, at=100.0))
    await store.checkpoint(state, now=150.0)
    await store.writer.close()
    newest = list_checkpoints(checkpoint_dir(tmp_path))[0][1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    got = recover(tmp_path)
    assert got.checkpoint_seq < list_checkpoints(checkpoint_dir(tmp_path))[0][0]
    same(got.state, state)


async def test_finished_jobs_past_retention_are_dropped_at_checkpoint(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path, finished_retention_s=100.0)
    retain(store, tmp_path)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    await commit(store, state, history(1, 30, at=10.0))  # jobs 3, 6, ... end at t=11
    array = parse_array_spec("1-4").indices
    await commit(
        store,
        state,
        [
            ev.ArraySubmitted(10.0, 31, SPEC, array),
            ev.JobStarted(10.0, "31[2]", "h1"),
            ev.JobFinished(11.0, "31[2]", 0, 0),
            ev.ArrayCancelled(11.0, 31),
        ],
    )
    done = [j for j in state.jobs.values() if j.state.finished]
    assert len(done) == 11
    seq = store.writer.next_seq
    await store.checkpoint(state, now=50.0)  # cutoff -50: nothing old enough
    assert len(state.jobs) == 31 and store.writer.next_seq == seq  # no purge, no record
    await store.checkpoint(state, now=500.0)  # cutoff 400: the finished ones go
    assert len(state.jobs) == 20 and 31 not in state.arrays
    assert all(not j.state.finished for j in state.jobs.values())
    # ... by one event in the WAL, naming the plain jobs and the array
    assert store.writer.next_seq == seq + 1
    purge = list_events(tmp_path)[-1]
    assert isinstance(purge, ev.JobsPurged)
    assert purge.ids == (*(str(n) for n in range(3, 31, 3)), "31")
    await commit(store, state, history(32, 3, at=600.0))
    await store.writer.close()
    got = recover(tmp_path)
    same(got.state, state)
    assert got.state.outcome("3").value == "missing"
    # the WAL alone (no checkpoint) replays the purge too
    for _, path in list_checkpoints(checkpoint_dir(tmp_path)):
        path.unlink()
    same(recover(tmp_path).state, state)


def list_events(state_dir: Path) -> list[ev.Event]:
    from xce.store.wal.reader import scan_wal

    found: list[ev.Event] = []
    scan_wal(wal_dir(state_dir), 0, lambda seq, event: found.append(event))
    return found


async def test_a_checkpoint_without_a_purger_drops_nothing(tmp_path: Path) -> None:
    """A standby's log has no purger: it drops jobs only when it replays JobsPurged."""
    store, state = await open_store(tmp_path, finished_retention_s=1.0)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    await commit(store, state, history(1, 6, at=10.0))
    await store.checkpoint(state, now=1000.0)
    assert len(state.jobs) == 6
    await store.writer.close()


async def test_retention_keeps_jobs_that_waiting_jobs_depend_on(tmp_path: Path) -> None:
    from xce.core.deps import parse_dependency

    store, state = await open_store(tmp_path, finished_retention_s=10.0)
    retain(store, tmp_path)
    await commit(
        store,
        state,
        [ev.QueueCreated(0, QueueRecord("normal")), ev.HostRegistered(0, "h1", 64, 10**6)],
    )
    await commit(store, state, history(1, 6, at=10.0))  # 3 and 6 finish at t=11
    waiting = JobSpec(
        user="bob",
        queue="normal",
        command="true",
        dependency=parse_dependency("afterok:3"),
        hold=True,
    )
    await commit(store, state, [ev.JobSubmitted(12.0, 7, waiting)])
    await store.checkpoint(state, now=1000.0)
    assert "3" in state.jobs and "6" not in state.jobs
    assert state.outcome("3").value == "done"
    await store.writer.close()


def test_format_1_checkpoints_are_still_read(tmp_path: Path) -> None:
    from xce.store.checkpoint import checkpoint_name, read_checkpoint
    from xce.store.wal.framing import frame
    from xce.wire.codec import encode_header, encode_records

    state = ClusterState()
    for e in [
        ev.QueueCreated(0, QueueRecord("normal")),
        ev.HostRegistered(0, "h1", 8, 100),
        *history(1, 30, at=5.0),
    ]:
        state.apply(e)
    jobs = list(state.jobs.values())
    path = tmp_path / checkpoint_name(99)
    path.write_bytes(
        frame(
            encode_header(
                seq=99,
                epoch=0,
                nextNumber=state.next_number,
                createdAt=1.0,
                formatVersion=1,
                jobs=len(jobs),
                arrays=0,
            )
        )
        + frame(encode_records("queues", list(state.queues.values())))
        + frame(encode_records("hosts", list(state.hosts.values())))
        + frame(encode_records("jobs", jobs))
    )
    header, got = read_checkpoint(path)
    assert header["formatVersion"] == 1
    same(got, state)


def test_plain_codec_round_trips_every_record_kind() -> None:
    from xce.wire.plain import pack_records, unpack_records

    state = ClusterState()
    array = parse_array_spec("1-50:7%2")
    for e in [
        ev.QueueCreated(0, QueueRecord("normal")),
        ev.HostRegistered(0, "h1", 8, 100),
        *history(1, 12, at=5.0),
        ev.ArraySubmitted(6, 13, SPEC, array.indices, 2),
        ev.JobStarted(7, "13[8]", "h1"),
        ev.ArrayHeld(8, 13),
    ]:
        state.apply(e)
    for records in (
        list(state.jobs.values()),
        list(state.arrays.values()),
        list(state.queues.values()),
        list(state.hosts.values()),
    ):
        assert unpack_records(type(records[0]), pack_records(records)) == records


def test_rows_from_before_fields_were_appended_read_with_defaults() -> None:
    """A job row of an older checkpoint lacks the last fields (submit_key, devices,
    eligible_time, preempted_by, resumed_time, allocation): the generated row builder hands it to
    `from_plain`, which fills defaults. Older checkpoints are `marshal` chunks (the layout is
    built here as the old build wrote it); msgpack chunks with short rows read the same."""
    import marshal

    from xce.wire import packing
    from xce.wire.plain import to_plain, unpack_records

    state = ClusterState()
    for e in [
        ev.QueueCreated(0, QueueRecord("normal")),
        ev.HostRegistered(0, "h1", 8, 100),
        *history(1, 6, at=5.0),
    ]:
        state.apply(e)
    jobs = list(state.jobs.values())
    kind, table, rows = "jobs", (to_plain(SPEC),), tuple(to_plain(j, {"spec": 0}) for j in jobs)
    assert {j.spec for j in jobs} == {SPEC}
    for dump in (marshal.dumps, packing.pack):
        old = dump((kind, table, tuple(row[:-6] for row in rows)))
        assert unpack_records(type(jobs[0]), old) == [
            dataclasses.replace(j, eligible_time=None, preempted_by="", resumed_time=None)
            for j in jobs
        ]
        # and from just before the multi-host allocation was appended
        old = dump((kind, table, tuple(row[:-1] for row in rows)))
        assert unpack_records(type(jobs[0]), old) == jobs
