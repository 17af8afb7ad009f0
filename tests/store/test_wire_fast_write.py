"""The generated WAL entry writer (`xce.wire.fast_write`) against pycapnp's builder.

The writer must produce the builder's bytes exactly, so that the log's format does not depend
on which of the two wrote a record; where it cannot (values of another type, NUL in text, a
message longer than the builder's first segment, values out of range) it must step aside
with one of `WRITE_REJECTS`, and `WalWriter.prepare` then gives the reference's bytes or its
`WireError`.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.test_wire import SAMPLES
from xce.core import events as ev
from xce.core.arrayspec import IndexSet, parse_array_spec
from xce.core.model import JobSpec, Usage
from xce.store.wal import WalWriter, frame
from xce.wire.codec import WireError, encode_entry
from xce.wire.fast_write import WRITE_REJECTS, encode_entry_fast
from xce.wire.types import EVENT_TYPES

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=30)


def test_every_event_type_is_written_as_the_builder_writes_it() -> None:
    for i, event in enumerate(SAMPLES):
        assert encode_entry_fast(i + 1, 5, event) == encode_entry(i + 1, 5, event), event


@settings(max_examples=300, deadline=None)
@given(
    number=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**64 - 1),
    user=TEXT,
    command=st.none() | TEXT,
    slots=INT64,
    walltime=st.none() | INT64,
    begin=st.none() | st.floats(allow_nan=False),
    env=st.lists(st.tuples(TEXT, TEXT), max_size=40).map(tuple),
    inputs=st.lists(TEXT, max_size=3).map(tuple),
    hold=st.booleans(),
    exclusive=st.booleans(),
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
def test_random_records_are_written_as_the_builder_writes_them(
    number: int,
    epoch: int,
    user: str,
    command: str | None,
    slots: int,
    walltime: int | None,
    begin: float | None,
    env: tuple[tuple[str, str], ...],
    inputs: tuple[str, ...],
    hold: bool,
    exclusive: bool,
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
        exclusive=exclusive,
        begin_time=begin,
    )
    for event in (
        ev.JobSubmitted(at, number, spec, key),
        ev.ArraySubmitted(at, number, spec, parse_array_spec("1-7:3,9").indices, slots % 5, key),
        ev.JobFinished(at, user, number % 1000, code, None, usage, key, outputs),
    ):
        try:
            reference: bytes | None = encode_entry(number, epoch, event)
        except WireError:
            reference = None
        try:
            fast = encode_entry_fast(number, epoch, event)
        except WRITE_REJECTS:
            # Only what it must leave to the reference: a NUL, or a second segment.
            assert reference is None or "\\x00" in repr(event) or len(reference) > 8 * 1024
            continue
        assert fast == reference


def _a_submit() -> ev.JobSubmitted:
    for event in SAMPLES:
        if isinstance(event, ev.JobSubmitted):
            return event
    raise AssertionError("SAMPLES holds every event type")


SUBMIT = _a_submit()


@pytest.mark.parametrize(
    "event",
    [
        dataclasses.replace(SUBMIT, spec=dataclasses.replace(SUBMIT.spec, script="x" * 20_000)),
        dataclasses.replace(SUBMIT, spec=dataclasses.replace(SUBMIT.spec, name="a\0b")),
        dataclasses.replace(SUBMIT, spec=dataclasses.replace(SUBMIT.spec, slots=True)),
        dataclasses.replace(SUBMIT, at=3),
    ],
    ids=["second segment", "NUL", "bool for int", "int for float"],
)
def test_shapes_it_leaves_to_the_reference_still_log_the_reference_bytes(
    tmp_path: Path, event: ev.Event
) -> None:
    with pytest.raises(WRITE_REJECTS):
        encode_entry_fast(1, 0, event)
    try:
        expected = frame(encode_entry(1, 0, event))
    except WireError as exc:
        with pytest.raises(WireError, match=exc.message[:40]):
            WalWriter(tmp_path, 1).prepare(event)
        return
    assert WalWriter(tmp_path, 1).prepare(event) == expected


def test_a_value_the_schema_cannot_hold_is_still_a_wire_error(tmp_path: Path) -> None:
    event = dataclasses.replace(SUBMIT, spec=dataclasses.replace(SUBMIT.spec, slots=2**63))
    with pytest.raises(WireError):
        WalWriter(tmp_path, 1).prepare(event)


# Values of each plain type for the records below. CLEAN: any value the log holds (every
# int64, every float with NaN and infinities, any text without NUL or lone surrogates), all
# of which the fast writer must write itself. HOSTILE: NULs, lone surrogates, ints beyond
# int64, which it must leave to the builder (or write alike).
_ARRAYS = st.sampled_from(["1", "1-7:3,9", "1-1000000", "0-3,5,9-20:2%4"]).map(
    lambda s: parse_array_spec(s).indices
)
CLEAN: dict[object, st.SearchStrategy[object]] = {
    str: st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=10),
    int: st.integers(-(2**63), 2**63 - 1),
    float: st.floats() | st.sampled_from([-0.0, float("inf"), float("-inf")]),
    bool: st.booleans(),
    IndexSet: _ARRAYS,
}
HOSTILE: dict[object, st.SearchStrategy[object]] = {
    **CLEAN,
    str: CLEAN[str] | st.sampled_from(["", "é☃\U0001f600", "a\x00b", "\ud800"]),
    int: CLEAN[int] | st.sampled_from([2**63, -(2**63) - 1]),
}


def drawn(
    hint: object, plain: dict[object, st.SearchStrategy[object]]
) -> st.SearchStrategy[object]:
    """Values of the type `hint` with every field of a dataclass drawn, defaults included
    (`st.builds` leaves those at their default, and they are most of a record's optional
    shapes: None, empty and long lists, nested structs). No global registration: other tests
    in the process keep hypothesis' own strategies for str, int and float."""
    if hint in plain:
        return plain[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(drawn(a, plain) for a in args))
    if hint is type(None):
        return st.none()
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(drawn(args[0], plain), max_size=4).map(tuple)
        return st.tuples(*(drawn(a, plain) for a in args))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        fields = {
            f.name: st.deferred(lambda t=hints[f.name]: drawn(t, plain))
            for f in dataclasses.fields(hint)
            if f.init
        }
        return st.builds(hint, **fields)
    raise TypeError(f"no strategy for {hint!r}")


@pytest.mark.parametrize("hostile", [False, True], ids=["clean", "hostile"])
@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_event_type_with_random_fields_is_written_as_the_builder_writes_it(
    cls: type, hostile: bool
) -> None:
    """Every field of every event type drawn: the fast writer writes every clean record
    itself (within the builder's first segment), with the builder's bytes; a hostile value
    it writes alike or leaves to the builder, which refuses what the log cannot hold."""

    @settings(max_examples=40, deadline=None, database=None)
    @given(event=drawn(cls, HOSTILE if hostile else CLEAN), seq=st.integers(0, 2**63 - 1))
    def check(event: ev.Event, seq: int) -> None:
        try:
            reference: bytes | None = encode_entry(seq, 3, event)
        except WireError:
            reference = None
        try:
            fast = encode_entry_fast(seq, 3, event)
        except WRITE_REJECTS:
            assert hostile or reference is None or len(reference) > 8 * 1024, event
            return
        assert fast == reference, event

    check()
