"""The packed chunk format: versioned msgpack, today's marshal files still read, unknown
versions refused by name (xce/wire/packing.py)."""

from __future__ import annotations

import marshal
from pathlib import Path
from typing import Any

import pytest

from tests.store.test_checkpoint import SPEC, history, same
from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.model import JobRecord, QueueRecord, ReservationRecord
from xce.core.state import ClusterState
from xce.core.versions import NewerFormat
from xce.store.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    checkpoint_name,
    copy_state,
    list_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from xce.store.wal.framing import frame
from xce.wire import packing
from xce.wire.codec import encode_header, encode_packed
from xce.wire.plain import pack_records, to_plain


def a_state() -> ClusterState:
    """Every record kind: queues, hosts, jobs (finished, with usage), arrays, reservations."""
    state = ClusterState()
    array = parse_array_spec("1-50:7%2")
    for e in [
        ev.QueueCreated(0, QueueRecord("normal")),
        ev.HostRegistered(0, "h1", 8, 100),
        *history(1, 12, at=5.0),
        ev.ArraySubmitted(6, 13, SPEC, array.indices, 2),
        ev.JobStarted(7, "13[8]", "h1"),
        ev.ReservationAdded(8, ReservationRecord("maint", ("h1",), 100.0, 200.0, users=("bob",))),
    ]:
        state.apply(e)
    return state


def old_marshal_chunk(records: list[Any]) -> bytes:
    """A chunk exactly as the marshal-based build (checkpoint format 2) wrote it."""
    if records and isinstance(records[0], JobRecord):
        specs: dict[Any, int] = {}
        table: list[tuple[Any, ...]] = []
        rows = []
        for job in records:
            if job.spec not in specs:
                specs[job.spec] = len(table)
                table.append(to_plain(job.spec))
            rows.append(to_plain(job, {"spec": specs[job.spec]}))
        return marshal.dumps(("jobs", tuple(table), tuple(rows)))
    return marshal.dumps(("records", None, tuple(to_plain(r) for r in records)))


def write_file(path: Path, state: ClusterState, version: int, pack: Any) -> None:
    chunks = [
        ("queues", list(state.queues.values())),
        ("hosts", list(state.hosts.values())),
        ("reservations", list(state.reservations.values())),
        ("arrays", list(state.arrays.values())),
        ("jobs", list(state.jobs.values())),
    ]
    header = encode_header(
        seq=99,
        epoch=3,
        nextNumber=state.next_number,
        createdAt=1.0,
        formatVersion=version,
        jobs=len(state.jobs),
        arrays=len(state.arrays),
        numberCeiling=state.number_ceiling,
    )
    path.write_bytes(
        frame(header)
        + b"".join(frame(encode_packed(kind, pack(records))) for kind, records in chunks if records)
    )


def test_a_checkpoint_the_marshal_build_wrote_is_read(tmp_path: Path) -> None:
    state = a_state()
    path = tmp_path / checkpoint_name(99)
    write_file(path, state, 2, old_marshal_chunk)
    header, got = read_checkpoint(path)
    assert header["formatVersion"] == 2 and header["epoch"] == 3
    same(got, state)


def test_round_trip_writes_versioned_msgpack(tmp_path: Path) -> None:
    state = a_state()
    path = write_checkpoint(tmp_path, copy_state(state, 99, epoch=4))
    assert list_checkpoints(tmp_path) == [(99, path)]
    header, got = read_checkpoint(path)
    assert header["formatVersion"] == FORMAT_VERSION == 3
    assert (header["seq"], header["epoch"]) == (99, 4)
    same(got, state)
    data = pack_records(list(state.jobs.values()))
    assert data.startswith(packing.MAGIC + packing.VERSION.to_bytes(2, "big"))


def test_current_chunks_take_the_typed_decoder() -> None:
    """The fast path: every record kind's rows fit its generated tuple type (a mismatch would
    silently fall back to the slow untyped decode)."""
    state = a_state()
    for records in (
        list(state.jobs.values()),
        list(state.arrays.values()),
        list(state.queues.values()),
        list(state.hosts.values()),
        list(state.reservations.values()),
    ):
        data = pack_records(records)
        _, _, rows = packing.decoder(type(records[0])).decode(data[6:])
        assert rows and all(type(r) is tuple for r in rows)


def test_an_unknown_version_is_refused_by_name(tmp_path: Path) -> None:
    state = a_state()
    path = tmp_path / checkpoint_name(99)

    def future(records: list[Any]) -> bytes:
        return packing.MAGIC + (99).to_bytes(2, "big") + pack_records(records)[6:]

    write_file(path, state, FORMAT_VERSION, future)
    with pytest.raises(CheckpointError, match="format version 99 is unknown"):
        read_checkpoint(path)


def test_a_newer_checkpoint_format_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / checkpoint_name(99)
    write_file(path, a_state(), 7, pack_records)
    with pytest.raises(NewerFormat, match=f"newer format 7 .*reads ≤ {FORMAT_VERSION}"):
        read_checkpoint(path)
