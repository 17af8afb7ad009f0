"""The Cap'n Proto schema matches the dataclasses, and every event survives the wire."""

from __future__ import annotations

import contextlib
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.deps import parse_dependency
from xce.core.model import (
    HostFailurePolicy,
    HostSlots,
    HostUsage,
    JobSpec,
    QueueRecord,
    ReservationRecord,
    Usage,
)
from xce.wire.codec import SCHEMA_PATH, WireError, decode_entry, encode_entry
from xce.wire.schema import generate
from xce.wire.types import EVENT_TYPES

SPEC = JobSpec(
    user="u",
    queue="q",
    name="n",
    command=None,
    script="#!/bin/sh\necho é",
    slots=3,
    memory_mb=10,
    walltime_s=None,
    env=(("A", "1"), ("B", "")),
    cwd="/tmp",
    inputs=("a/b",),
    outputs=("*.out",),
    dependency=parse_dependency("afterok:1,afterany:2[3]"),
    hold=True,
    submit_host="h",
    gres=(("gpu", "2"),),
    licenses=(("matlab", "1"),),
    reservation="maint",
    begin_time=1234.5,
)
SAMPLES: list[ev.Event] = [
    ev.QueueCreated(
        1.0, QueueRecord("q", -5, False, True, ("h1", "h2"), "d", HostFailurePolicy.EXIT)
    ),
    ev.QueueOpened(1.0, "q"),
    ev.QueueClosed(1.0, "q"),
    ev.QueueActivated(1.0, "q"),
    ev.QueueDeactivated(1.0, "q"),
    ev.QueueModified(
        1.0,
        QueueRecord(
            "q",
            7,
            hosts=("@gpu",),
            max_walltime_s=3600,
            default_memory_mb=512,
            max_slots=4,
            users=("alice", "@physics"),
        ),
    ),
    ev.QueueDeleted(1.0, "q"),
    ev.HostRegistered(2.0, "h1", 8, 1024, (("rack", "r1"),)),
    ev.HostRegistered(2.0, "h1", 8, 1024, (), (("gpu", "0,1"), ("fpga", "a"))),
    ev.HostOpened(2.0, "h1"),
    ev.HostClosed(2.0, "h1", "why"),
    ev.HostDrainStarted(2.0, "h1", "drain"),
    ev.HostUnavailable(2.0, "h1"),
    ev.HostAvailable(2.0, "h1"),
    ev.JobSubmitted(3.0, 7, SPEC),
    ev.ArraySubmitted(3.0, 8, SPEC, parse_array_spec("1-9:2,20").indices, None),
    ev.JobStarted(4.0, "7", "h1"),
    ev.JobStarted(4.0, "7", "h1", ("gpu:0", "gpu:1")),
    ev.JobSuspended(4.0, "7", True),
    ev.JobResumed(4.0, "7"),
    ev.JobKillRequested(4.0, "7"),
    ev.JobKilled(4.0, "8[3]", "r"),
    ev.JobRequeued(4.0, "7"),
    ev.JobHostLost(4.0, "7", False),
    ev.JobStarted(4.0, "9", "h1", hosts=(HostSlots("h1", 2), HostSlots("h2", 2))),
    ev.JobStarted(
        4.5,
        "10",
        "h1",
        ("gpu:0",),
        hosts=(HostSlots("h1", 1, ("gpu:0",)), HostSlots("h2", 1, ("gpu:1",))),
    ),
    ev.JobHostLost(4.0, "9", True, "h2"),
    ev.JobSubmitted(
        3.0,
        9,
        JobSpec(
            user="u",
            queue="q",
            slots=4,
            resources="span[ptile=2]",
            exclusive=True,
            mem_per_slot_mb=100,
            memory_mb=400,
        ),
    ),
    ev.JobFinished(5.0, "7", 2, -1, 9, Usage(1.5, 0.5, 10, 2.0), "why", ("x",)),
    ev.JobFinished(5.0, "7", 2, None, None, None),
    ev.JobFinished(
        5.0,
        "9",
        0,
        0,
        None,
        Usage(3.0, 1.0, 20, 2.0),
        "",
        (),
        (HostUsage("h1", 1.0, 0.5, 20), HostUsage("h2", 2.0, 0.5, 10)),
    ),
    ev.JobFinished(
        5.0,
        "10",
        0,
        0,
        None,
        None,
        "",
        ("out",),
        (),
        ("big.dat: 5.0 GB is over the limit", "b.txt: a file and a directory of one name"),
    ),
    ev.JobUsageReported(5.0, "7", 1, Usage()),
    ev.ArrayHeld(6.0, 8),
    ev.ArrayReleased(6.0, 8),
    ev.ArrayCancelled(6.0, 8, "k"),
    ev.JobsPurged(7.0, ("3", "8")),
    ev.JobNumbersReserved(7.0, 9, 1008),
    ev.ReservationAdded(
        8.0,
        ReservationRecord(
            "r1",
            ("h1", "h2"),
            100.0,
            200.5,
            2,
            ("alice", "@physics"),
            False,
            ("overlap",),
            "d",
            "admin",
            8.0,
        ),
    ),
    ev.ReservationDeleted(8.0, "r1"),
    ev.JobModified(8.0, "7", dataclasses.replace(SPEC, priority=20, walltime_s=60)),
    ev.JobModified(8.0, "8", SPEC),
    ev.JobPreempted(8.0, "7", "9", True),
    ev.JobPreempted(8.0, "7", "9"),
    ev.QueueModified(
        8.0,
        QueueRecord(
            "q", 7, preempt=("low", "scavenger"), preempt_mode="requeue", preempt_min_run_s=60
        ),
    ),
]


def test_committed_schema_is_generated_from_the_dataclasses() -> None:
    assert SCHEMA_PATH.read_text() == generate(), (
        "run: python -m xce.wire.schema > xce/wire/xce.capnp"
    )


def test_every_event_type_round_trips() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES)
    for i, event in enumerate(SAMPLES):
        seq, epoch, back = decode_entry(encode_entry(i + 1, 3, event))
        assert (seq, epoch, back) == (i + 1, 3, event)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_garbage_is_a_wire_error_never_a_crash(data: bytes) -> None:
    with contextlib.suppress(WireError):
        decode_entry(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(SAMPLES) - 1), st.integers(0, 10_000), st.integers(0, 255))
def test_flipped_bytes_are_caught_or_decode(index: int, position: int, value: int) -> None:
    data = bytearray(encode_entry(1, 0, SAMPLES[index]))
    data[position % len(data)] = value
    with contextlib.suppress(WireError):
        decode_entry(bytes(data))
