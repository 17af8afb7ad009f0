"""The generated WAL entry reader (`xce.wire.fast`) against the reflective reference.

Both must give the same event for every record the writer produces, including records an
older schema wrote (fewer fields); on bytes the fast reader does not handle it must step
aside (one of `FAST_REJECTS`), never return something the reference would not.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import capnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.test_wire import SAMPLES
from xce.core import events as ev
from xce.core.model import JobSpec, Usage
from xce.wire.codec import (
    WireError,
    decode_entry,
    decode_entry_reflective,
    encode_entry,
)
from xce.wire.fast import FAST_REJECTS, Fallback, peek_entry, read_entry
from xce.wire.schema import FILE_ID, generate
from xce.wire.types import EVENT_TYPES

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=30)


def test_every_event_type_reads_the_same_as_the_reference() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES)
    for i, event in enumerate(SAMPLES):
        data = encode_entry(i + 1, 5, event)
        assert read_entry(data) == decode_entry_reflective(data) == (i + 1, 5, event)
        assert peek_entry(data) == (i + 1, 5)


@settings(max_examples=300, deadline=None)
@given(
    number=st.integers(0, 2**63 - 1),
    user=TEXT,
    command=st.none() | TEXT,
    slots=INT64,
    walltime=st.none() | INT64,
    env=st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple),
    inputs=st.lists(TEXT, max_size=3).map(tuple),
    hold=st.booleans(),
    key=TEXT,
    code=st.none() | INT64,
    usage=st.none()
    | st.builds(
        Usage,
        st.floats(allow_nan=False),
        st.floats(allow_nan=False),
        INT64,
        st.floats(allow_nan=False),
    ),
    outputs=st.lists(TEXT, max_size=3).map(tuple),
    at=st.floats(allow_nan=False),
)
def test_random_records_read_the_same(
    number: int,
    user: str,
    command: str | None,
    slots: int,
    walltime: int | None,
    env: tuple[tuple[str, str], ...],
    inputs: tuple[str, ...],
    hold: bool,
    key: str,
    code: int | None,
    usage: Usage | None,
    outputs: tuple[str, ...],
    at: float,
) -> None:
    spec = JobSpec(
        user=user,
        queue="q",
        command=command,
        slots=slots,
        walltime_s=walltime,
        env=env,
        inputs=inputs,
        hold=hold,
    )
    for event in (
        ev.JobSubmitted(at, number, spec, key),
        ev.JobFinished(at, user, number % 1000, code, None, usage, key, outputs),
    ):
        data = encode_entry(number, 1, event)
        assert read_entry(data) == decode_entry_reflective(data) == (number, 1, event)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(0, len(SAMPLES) - 1),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_damaged_bytes_read_as_the_reference_reads_them_or_step_aside(
    index: int, flips: list[tuple[int, int]]
) -> None:
    """Never a value the reference would not give: a record the framing let through (a
    writer bug, not a disk) must not turn into some other event."""
    data = bytearray(encode_entry(3, 1, SAMPLES[index]))
    for position, value in flips:
        data[position % len(data)] = value
    try:
        fast = read_entry(bytes(data))
    except FAST_REJECTS:
        with contextlib.suppress(WireError):
            decode_entry(bytes(data))  # the reference's verdict, whatever it is
        return
    assert repr(fast) == repr(decode_entry_reflective(bytes(data)))  # NaN != NaN


def test_a_multi_segment_message_falls_back_to_the_reference() -> None:
    big = ev.JobSubmitted(1.0, 9, JobSpec(user="u", queue="q", script="x" * 200_000))
    data = encode_entry(4, 2, big)
    with pytest.raises(Fallback):
        read_entry(data)
    assert decode_entry(data) == (4, 2, big)


def _old_schema(tmp_path: Path, drop: dict[str, str]) -> Any:
    """The schema as it was before the named fields were appended (same layout otherwise):
    each named field goes, with every field appended after it (ordinals have no gaps)."""
    text = generate().replace(FILE_ID, "0xe2a1f3b4c5e6f709")
    for struct_name, line in drop.items():
        head, _, rest = text.partition(f"struct {struct_name} {{")
        body, _, tail = rest.partition("}")
        assert line in body
        body = body[: body.index(line)]
        text = head + f"struct {struct_name} {{" + body + "}" + tail
    path = tmp_path / "old.capnp"
    path.write_text(text)
    return capnp.load(str(path), imports=[])


def test_records_an_older_schema_wrote_read_with_defaults(tmp_path: Path) -> None:
    """Fields appended later (JobSubmitted.key, JobSpec.resources, JobFinished.outputs)
    are absent from old records: both readers give their defaults."""
    old = _old_schema(
        tmp_path,
        {
            "JobSubmitted": "  key @2 :Text;\n",
            "JobSpec": "  resources @15 :Text;\n",
            "JobFinished": "  outputs @6 :List(Text);\n",
        },
    )
    submit = old.WalEntry.new_message(seq=7, epoch=1)
    event = submit.init("event")
    event.at = 2.5
    body = event.init("jobSubmitted")
    body.number = 11
    spec = body.init("spec")
    spec.user, spec.queue, spec.slots = "alice", "normal", 2
    spec.init("command").value = "true"
    data = submit.to_bytes()
    assert len(data) < len(
        encode_entry(
            7,
            1,
            ev.JobSubmitted(
                2.5, 11, JobSpec(user="alice", queue="normal", command="true", slots=2)
            ),
        )
    )
    expected = (
        7,
        1,
        ev.JobSubmitted(2.5, 11, JobSpec(user="alice", queue="normal", command="true", slots=2)),
    )
    assert read_entry(data) == decode_entry_reflective(data) == expected

    finish = old.WalEntry.new_message(seq=8, epoch=1)
    event = finish.init("event")
    event.at = 3.0
    body = event.init("jobFinished")
    body.jobId, body.attempt = "11", 1
    body.init("exitCode").value = 0
    data = finish.to_bytes()
    expected = (8, 1, ev.JobFinished(3.0, "11", 1, 0))
    assert read_entry(data) == decode_entry_reflective(data) == expected


def test_peek_reads_seq_and_epoch_only() -> None:
    data = bytearray(encode_entry(12345, 7, ev.JobStarted(1.0, "5", "h")))
    assert peek_entry(bytes(data)) == (12345, 7)
    data[0] = 1  # claims two segments: not the shape the fast reader handles
    with pytest.raises(Fallback):
        peek_entry(bytes(data))
