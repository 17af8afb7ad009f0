"""Hypothesis fuzzing of the parsers that read untrusted text and bytes.

The promise under test: whatever the input, each parser either succeeds or raises its own
error type (`InvalidRequest` for user text, `WalCorruption` for log damage) — never an
IndexError, a ValueError from deep inside, a hang or a crash. More examples with
`XCE_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.deps import parse_dependency
from xce.core.errors import InvalidRequest
from xce.core.model import JobSpec
from xce.store.wal.reader import WalCorruption, scan_wal, segment_name
from xce.store.wal.writer import WalWriter

EXAMPLES = int(os.environ.get("XCE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None)

# Text near the grammar finds more than uniform Unicode: digits, separators, keywords.
ARRAY_ALPHABET = st.sampled_from([*"0123456789-,:%[] x", "10", "1000000", "-1"])
DEP_ALPHABET = st.sampled_from(
    [
        "afterok",
        "afterany",
        "afternotok",
        "singleton",
        ":",
        ",",
        "?",
        "&&",
        "(",
        ")",
        "[",
        "]",
        "1",
        "17",
        "17[5]",
        " ",
        "x",
        "-",
    ]
)


@FUZZ
@given(st.one_of(st.text(max_size=40), st.lists(ARRAY_ALPHABET, max_size=15).map("".join)))
def test_array_spec_parser_only_raises_invalid_request(text: str) -> None:
    try:
        spec = parse_array_spec(text, max_size=10_000)
    except InvalidRequest:
        return
    assert 0 < len(spec.indices) <= 10_000
    assert spec.max_concurrent is None or spec.max_concurrent > 0


@FUZZ
@given(st.one_of(st.text(max_size=40), st.lists(DEP_ALPHABET, max_size=12).map("".join)))
def test_dependency_parser_only_raises_invalid_request(text: str) -> None:
    try:
        parse_dependency(text)
    except InvalidRequest:
        return


def _good_log(directory: Path, records: int) -> bytes:
    """A real WAL segment written by the real writer, returned as bytes."""
    import asyncio

    async def write() -> None:
        writer = WalWriter(directory, 1, segment_bytes=1 << 16, preallocate=False)
        for i in range(records):
            spec = JobSpec(user="u", queue="normal", command=f"echo {i}")
            writer.append(ev.JobSubmitted(float(i), i + 1, spec))
        await writer.sync()
        await writer.close()

    asyncio.run(write())
    return (directory / segment_name(1)).read_bytes()


GOOD = _good_log(Path(tempfile.mkdtemp(prefix="xce-fuzz-wal-")), 8)


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(GOOD)),
    st.binary(max_size=64),
)
def test_wal_reader_on_damaged_segments_only_raises_wal_corruption(
    flips: list[tuple[int, int]], cut: int, tail: bytes
) -> None:
    data = bytearray(GOOD)
    for offset, value in flips:
        data[offset] = value
    data = data[:cut] + tail
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / segment_name(1)).write_bytes(bytes(data))
        seen: list[int] = []
        try:
            scan = scan_wal(Path(tmp), on_event=lambda seq, _event: seen.append(seq))
        except WalCorruption:
            return
        # Whatever was read is a gap-free prefix of the records that were written.
        assert seen == list(range(1, len(seen) + 1))
        assert scan.records == len(seen) <= 8


SWF_TOKENS = st.sampled_from(
    ["1", "0", "-1", "3.5", "1e308", "1e999", "inf", "nan", "-0", "x", "", "9" * 30]
)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.text(max_size=60),
            st.lists(SWF_TOKENS, min_size=18, max_size=18).map(" ".join),
            st.just("; MaxProcs: 64"),
        ),
        max_size=8,
    )
)
def test_swf_reader_only_raises_swf_error(lines: list[str]) -> None:
    from xce.sched.sim.swf import SwfError, parse_swf

    try:
        trace = parse_swf(lines)
    except SwfError:
        return
    for job in trace.jobs:
        assert job.procs > 0 and job.run_time >= 0 and job.submit >= 0
