"""WAL framing, group commit, rollover, torn tails and corruption."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState
from xce.store.recovery import recover, wal_dir
from xce.store.wal import CorruptRecord, WalCorruption, WalWriter, frame, read_frames, scan_wal
from xce.store.wal.reader import list_segments

SPEC = JobSpec(user="alice", queue="normal", command="echo hi", env=(("A", "1"),))


def events(n: int) -> list[ev.Event]:
    out: list[ev.Event] = [ev.QueueCreated(1.0, QueueRecord("normal", priority=3))]
    out += [ev.JobSubmitted(2.0 + i, i + 1, SPEC) for i in range(n - 1)]
    return out


async def write(state_dir: Path, evs: list[ev.Event], **kw: object) -> WalWriter:
    kw.setdefault("segment_bytes", 256 * 1024)  # preallocated, but not 64 MiB per test
    writer = WalWriter(wal_dir(state_dir), 1, **kw)  # type: ignore[arg-type]
    for e in evs:
        writer.append(e)
    await writer.sync()
    await writer.close()
    return writer


def replayed(state_dir: Path) -> list[ev.Event]:
    seen: list[ev.Event] = []
    scan_wal(wal_dir(state_dir), 0, lambda seq, e: seen.append(e))
    return seen


def test_frames_round_trip_and_detect_damage() -> None:
    data = frame(b"hello") + frame(b"x" * 1000) + b"\0" * 64
    assert [f.payload for f in read_frames(data)] == [b"hello", b"x" * 1000]
    broken = bytearray(data)
    broken[10] ^= 0xFF
    with pytest.raises(CorruptRecord, match="checksum"):
        list(read_frames(bytes(broken)))
    with pytest.raises(CorruptRecord, match="torn"):
        list(read_frames(frame(b"abcdefgh")[:12]))


async def test_replay_returns_every_event_in_order(tmp_path: Path) -> None:
    evs = events(50)
    await write(tmp_path, evs)
    assert replayed(tmp_path) == evs


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    writer = WalWriter(wal_dir(tmp_path), 1, segment_bytes=256 * 1024)

    async def one(e: ev.Event) -> None:
        writer.append(e)
        await writer.sync()

    await asyncio.gather(*(one(e) for e in events(200)))
    assert writer.durable_seq == 200
    assert writer.stats["records"] == 200
    assert writer.stats["fsyncs"] < 50, writer.stats
    assert writer.stats["max_group"] > 1
    await writer.close()
    assert len(replayed(tmp_path)) == 200


async def test_segments_roll_over(tmp_path: Path) -> None:
    evs = events(3000)
    writer = WalWriter(wal_dir(tmp_path), 1, segment_bytes=64 * 1024)
    for i, e in enumerate(evs):
        writer.append(e)
        if i % 100 == 0:
            await writer.sync()
    await writer.sync()
    await writer.close()
    segments = list_segments(wal_dir(tmp_path))
    assert len(segments) > 5
    assert all(p.stat().st_size <= 64 * 1024 for _, p in segments)
    assert replayed(tmp_path) == evs


async def test_torn_tail_at_every_byte_offset_is_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    evs = events(5)
    await write(tmp_path / "orig", evs, preallocate=False)
    ((_, seg),) = list_segments(wal_dir(tmp_path / "orig"))
    data = seg.read_bytes()
    frames = list(read_frames(data))
    last = frames[-1]
    for cut in range(last.offset, last.end):
        d = tmp_path / f"cut{cut}"
        (d / "wal").mkdir(parents=True)
        (d / "wal" / seg.name).write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = recover(d)
        assert result.last_seq == 4, cut
        assert len(result.state.jobs) == 3
        if cut > last.offset:
            assert result.torn is not None
            assert "WAL tail was torn" in caplog.text
        # The repaired log is clean and ends at the last whole record.
        assert scan_wal(d / "wal").torn is None
        assert (d / "wal" / seg.name).stat().st_size == last.offset


async def test_a_bit_flip_in_the_last_record_refuses_to_start(tmp_path: Path) -> None:
    """A complete last record that fails its checksum may have been acknowledged: it is not
    cut as a torn write; the start stops and names wal-check and wal-repair --yes."""
    evs = events(5)
    await write(tmp_path, evs)  # preallocated: zeros after the last record
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    data = bytearray(seg.read_bytes())
    last = list(read_frames(bytes(data)))[-1]
    data[last.offset + 40] ^= 0x04  # one bit of its payload
    seg.write_bytes(bytes(data))
    with pytest.raises(WalCorruption) as err:
        recover(tmp_path)
    assert "not a torn write" in err.value.message
    assert "xce admin wal-check" in err.value.message
    assert "wal-repair" in err.value.message and "--yes" in err.value.message
    assert seg.read_bytes() == bytes(data)  # nothing was cut
    # a flipped bit of the length (here +512, reaching into the zeros after) is damage too
    data[last.offset + 40] ^= 0x04
    data[last.offset + 1] ^= 0x02
    seg.write_bytes(bytes(data))
    with pytest.raises(WalCorruption):
        recover(tmp_path)


async def test_a_torn_write_with_a_zeroed_sector_is_cut_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The crash hit while the last record's sectors were being written: from a sector
    boundary on, its bytes are still the preallocated zeros."""
    big = JobSpec(user="alice", queue="normal", command="echo " + "x" * 3000)
    evs = [*events(4), ev.JobSubmitted(9.0, 4, big)]
    await write(tmp_path, evs)
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    data = bytearray(seg.read_bytes())
    last = list(read_frames(bytes(data)))[-1]
    boundary = (last.offset // 512 + 2) * 512
    assert boundary < last.end
    data[boundary : last.end] = bytes(last.end - boundary)
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        result = recover(tmp_path)
    assert result.last_seq == 4 and result.torn and "torn" in result.torn
    assert "WAL tail was torn" in caplog.text
    assert scan_wal(wal_dir(tmp_path)).torn is None


async def test_preallocated_zeros_after_the_last_record_are_not_damage(tmp_path: Path) -> None:
    await write(tmp_path, events(5))
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    assert seg.stat().st_size == 256 * 1024  # zeros after the last record
    result = recover(tmp_path)
    assert result.last_seq == 5 and result.torn is None


def test_wal_repair_keeps_a_broken_copy_and_cuts_durably(tmp_path: Path) -> None:
    import asyncio as aio

    from xce.store.repair import check, repair

    writer = WalWriter(wal_dir(tmp_path), 1, segment_bytes=16 * 1024, preallocate=False)

    async def fill() -> None:
        for i, e in enumerate(events(300)):
            writer.append(e)
            if i % 20 == 0:
                await writer.sync()
        await writer.sync()
        await writer.close()

    aio.run(fill())
    segments = [p for _, p in list_segments(wal_dir(tmp_path))]
    assert len(segments) > 2
    first = segments[0]
    original = first.read_bytes()
    data = bytearray(original)
    frames = list(read_frames(original))[1:]  # the records, after the segment's header
    data[frames[3].offset + 20] ^= 0x01
    first.write_bytes(bytes(data))
    assert not check(tmp_path).healthy
    done = repair(tmp_path)
    assert any(".broken" in line for line in done), done
    kept = first.with_name(first.name + ".broken")
    assert kept.read_bytes() == bytes(data)  # the damaged segment, whole
    assert first.stat().st_size == frames[3].offset
    for later in segments[1:]:
        assert not later.exists()
        assert later.with_name(later.name + ".broken").exists()
    report = check(tmp_path)
    assert report.healthy and report.last_seq == 3
    assert recover(tmp_path).last_seq == 3


async def test_corruption_in_the_middle_refuses_to_start(tmp_path: Path) -> None:
    await write(tmp_path, events(10), preallocate=False)
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    data = bytearray(seg.read_bytes())
    second = list(read_frames(bytes(data)))[2]
    data[second.offset + 12] ^= 0x01
    seg.write_bytes(bytes(data))
    with pytest.raises(WalCorruption) as err:
        recover(tmp_path)
    assert "wal-repair" in err.value.message and "wal-check" in err.value.message


async def test_corruption_in_an_older_segment_refuses(tmp_path: Path) -> None:
    writer = WalWriter(wal_dir(tmp_path), 1, segment_bytes=16 * 1024)
    for i, e in enumerate(events(500)):
        writer.append(e)
        if i % 20 == 0:
            await writer.sync()
    await writer.sync()
    await writer.close()
    segments = list_segments(wal_dir(tmp_path))
    _, first = segments[0]
    data = bytearray(first.read_bytes())
    frames = list(read_frames(bytes(data)))
    data[frames[-1].offset + 10] ^= 0x01
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruption):
        recover(tmp_path)


async def test_replay_equals_live_state(tmp_path: Path) -> None:
    evs = [
        *events(100),
        ev.HostRegistered(50.0, "h1", 4, 1000),
        ev.JobStarted(51.0, "3", "h1"),
        ev.JobSuspended(52.0, "3"),
        ev.JobKilled(53.0, "4"),
    ]
    live = ClusterState()
    for e in evs:
        live.apply(e)
    await write(tmp_path, evs)
    got = recover(tmp_path).state
    assert got.jobs == live.jobs and got.queues == live.queues and got.hosts == live.hosts
    assert got.host_load == live.host_load and got.pending == live.pending


async def test_interval_policy_acknowledges_before_fsync(tmp_path: Path) -> None:
    writer = WalWriter(
        wal_dir(tmp_path), 1, fsync="interval", interval_s=0.2, segment_bytes=256 * 1024
    )
    writer.append(events(1)[0])
    await writer.sync()
    assert writer.durable_seq == 0  # acknowledged, not yet durable: the documented window
    await writer.sync(durable=True)
    assert writer.durable_seq == 1
    await writer.close()


async def test_a_durable_sync_and_close_do_not_wait_for_the_interval(tmp_path: Path) -> None:
    """Under `interval` a caller that needs the disk (a durable sync, a clean stop) gets the
    group written at once; with an hour's interval, waiting for its end would hang here."""
    writer = WalWriter(
        wal_dir(tmp_path), 1, fsync="interval", interval_s=3600.0, segment_bytes=256 * 1024
    )
    first, second = events(2)
    writer.append(first)
    await writer.sync()  # starts the flusher, which waits for the interval
    await asyncio.sleep(0)
    await asyncio.wait_for(writer.sync(durable=True), 60)
    assert writer.durable_seq == 1
    writer.append(second)
    await writer.sync()
    await asyncio.wait_for(writer.close(), 60)
    assert writer.durable_seq == 2


async def test_a_failed_fsync_on_a_fresh_segment_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    from xce.core.errors import Unavailable

    writer = WalWriter(wal_dir(tmp_path), 1, segment_bytes=256 * 1024)
    real = os.fdatasync
    failures = iter([True])

    def flaky(fd: int) -> None:
        if next(failures, False):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", flaky)
    evs = events(3)
    writer.append(evs[0])
    with pytest.raises(Unavailable, match="could not be made durable"):
        await writer.sync()
    with pytest.raises(Unavailable, match="cannot write its log"):
        writer.check_writable()
    for _ in range(50):  # the probe retries every second
        if not writer.failed:
            break
        await asyncio.sleep(0.1)
    assert not writer.failed
    writer.append(evs[1])
    writer.append(evs[2])
    await writer.sync()
    await writer.close()
    # The record whose fsync failed was rewritten into a fresh segment, nothing twice.
    assert replayed(tmp_path) == evs


def _entry(seq: int, event: ev.Event, undecodable: bool = False) -> bytes:
    """A framed WAL record; `undecodable` gives it an event kind no reader knows (its
    frame and its seq/epoch header stay valid: what a writer bug would leave)."""
    from xce.wire.codec import encode_entry
    from xce.wire.fast import _event_readers, _root, _struct

    data = bytearray(encode_entry(seq, 1, event))
    if undecodable:
        p, dw, _pc, lim = _root(bytes(data))
        ep, _edw, _epc = _struct(
            int.from_bytes(data[p + dw * 8 : p + dw * 8 + 8], "little"), p + dw * 8, lim
        )
        disc_at = _event_readers()[0]
        data[ep + disc_at : ep + disc_at + 2] = (999).to_bytes(2, "little")
    return frame(bytes(data))


def _segment(directory: Path, first: int, records: list[bytes]) -> None:
    from xce.store.wal.reader import segment_name

    directory.mkdir(parents=True, exist_ok=True)
    (directory / segment_name(first)).write_bytes(b"".join(records) + bytes(64))


def test_records_the_checkpoint_covers_are_framed_but_not_decoded(tmp_path: Path) -> None:
    """A covered record is checked (CRC, sequence) but never decoded, so one no
    reader understands does not stop a recovery that starts after it; `after_seq=0` (what
    `xce admin wal-check` reads) still decodes and refuses it."""
    evs = events(4)
    _segment(
        tmp_path,
        1,
        [
            _entry(1, evs[0]),
            _entry(2, evs[1], undecodable=True),
            _entry(3, evs[2]),
            _entry(4, evs[3]),
        ],
    )
    seen: list[int] = []
    scan = scan_wal(tmp_path, 2, lambda seq, e: seen.append(seq))
    assert (scan.records, scan.last_seq, seen) == (4, 4, [3, 4])
    with pytest.raises(WalCorruption, match="cannot decode"):
        scan_wal(tmp_path, 0)
    with pytest.raises(WalCorruption, match="cannot decode"):
        scan_wal(tmp_path, 1)  # record 2 is after the checkpoint: decoded, refused


def test_covered_records_still_have_their_sequence_and_checksum_checked(
    tmp_path: Path,
) -> None:
    evs = events(4)
    _segment(tmp_path / "gap", 1, [_entry(1, evs[0]), _entry(2, evs[1]), _entry(4, evs[3])])
    with pytest.raises(WalCorruption, match="expected record 3, found 4"):
        scan_wal(tmp_path / "gap", 10)
    records = [_entry(i + 1, e) for i, e in enumerate(evs)]
    flipped = bytearray(records[1])
    flipped[20] ^= 0x04  # a bit flip inside a covered, complete record
    _segment(tmp_path / "flip", 1, [records[0], bytes(flipped), records[2], records[3]])
    with pytest.raises(WalCorruption, match=r"damaged at byte .*checksum mismatch"):
        scan_wal(tmp_path / "flip", 10)


def test_fast_frame_loop_accepts_and_rejects_what_parse_at_does() -> None:
    """`iter_frames` against a loop over `parse_at` alone, on damaged copies of a log."""
    import random

    from xce.store.wal.framing import parse_at
    from xce.wire.codec import encode_entry

    good = b"".join(frame(encode_entry(i + 1, 1, e)) for i, e in enumerate(events(12)))
    good += bytes(600)
    rng = random.Random(22)

    def reference(data: bytes) -> list[tuple[int, bytes]] | tuple[int, str, bool]:
        view, out, offset = memoryview(data), [], 0
        try:
            while (found := parse_at(view, offset)) is not None:
                out.append((found.offset, found.payload))
                offset = found.end
        except CorruptRecord as exc:
            return exc.offset, exc.why, exc.torn
        return out

    for _ in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[: rng.randint(0, len(data))]
        try:
            got: list[tuple[int, bytes]] | tuple[int, str, bool] = [
                (f.offset, f.payload) for f in read_frames(bytes(data))
            ]
        except CorruptRecord as exc:
            got = (exc.offset, exc.why, exc.torn)
        assert got == reference(bytes(data))
