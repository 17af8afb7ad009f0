"""Formats across builds: today's headerless segments are read as format 1; a segment or a
checkpoint of a newer format stops recovery, `wal-check` and `wal-repair` by name, and is
never judged as damage nor cut (xce/core/versions.py, xce/store/wal/segment.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store.test_checkpoint_format import a_state, write_file
from tests.store.test_wal import events, write
from xce.core.errors import Conflict
from xce.core.versions import WAL_FORMAT, NewerFormat
from xce.store.checkpoint import checkpoint_name, copy_state, write_checkpoint
from xce.store.recovery import checkpoint_dir, recover, wal_dir
from xce.store.repair import check, repair
from xce.store.wal import read_frames
from xce.store.wal.reader import list_segments
from xce.store.wal.segment import MAGIC, header_frame, read_header
from xce.wire.plain import pack_records


async def test_a_new_segment_starts_with_its_format(tmp_path: Path) -> None:
    await write(tmp_path, events(5), preallocate=False)
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    fmt, start, release = read_header(seg.read_bytes())
    assert fmt == WAL_FORMAT and start > 0 and release
    assert next(iter(read_frames(seg.read_bytes()))).payload.startswith(MAGIC)
    assert recover(tmp_path).last_seq == 5


async def test_a_segment_without_a_header_is_read_as_format_1(tmp_path: Path) -> None:
    """The files the builds before formats were named wrote: records from byte 0."""
    await write(tmp_path, events(6), preallocate=False)
    ((_, seg),) = list_segments(wal_dir(tmp_path))
    data = seg.read_bytes()
    _, start, _ = read_header(data)
    seg.write_bytes(data[start:])
    assert read_header(seg.read_bytes())[:2] == (1, 0)
    got = recover(tmp_path)
    assert got.last_seq == 6 and len(got.state.jobs) == 5
    assert check(tmp_path).healthy


def _newer_segment(state_dir: Path, fmt: int = 99) -> Path:
    """Rewrite the last segment's header as a newer build's (format `fmt`)."""
    _, seg = list_segments(wal_dir(state_dir))[-1]
    data = seg.read_bytes()
    _, start, _ = read_header(data)
    seg.write_bytes(header_frame(fmt, "9.9.0") + data[start:])
    return seg


async def test_a_newer_segment_stops_recovery_by_name(tmp_path: Path) -> None:
    await write(tmp_path, events(5), preallocate=False)
    _newer_segment(tmp_path)
    with pytest.raises(NewerFormat) as err:
        recover(tmp_path)
    line = err.value.message
    assert "newer format 99" in line and f"reads ≤ {WAL_FORMAT}" in line and "9.9.0" in line
    assert "damage" not in line


async def test_wal_check_and_repair_never_call_a_newer_log_damaged_nor_cut_it(
    tmp_path: Path,
) -> None:
    await write(tmp_path, events(40), segment_bytes=2048, preallocate=False)
    seg = _newer_segment(tmp_path)
    before = {p.name: p.read_bytes() for _, p in list_segments(wal_dir(tmp_path))}
    report = check(tmp_path)
    assert report.corruption is None and report.newer
    assert "newer format 99" in report.newer[0]
    with pytest.raises(Conflict, match="nothing was cut"):
        repair(tmp_path)
    after = {p.name: p.read_bytes() for p in wal_dir(tmp_path).iterdir()}
    assert after == before and seg.name in after  # no .broken copy, no cut

    cli = subprocess.run(
        [sys.executable, "-m", "xce", "admin", "wal-check", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "newer format 99" in cli.stdout and "DAMAGED" not in cli.stdout
    cli = subprocess.run(
        [sys.executable, "-m", "xce", "admin", "wal-repair", "--state-dir", str(tmp_path), "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode != 0 and "nothing was cut" in cli.stderr + cli.stdout
    assert {p.name: p.read_bytes() for p in wal_dir(tmp_path).iterdir()} == before


def test_a_newer_checkpoint_stops_recovery_instead_of_falling_back(tmp_path: Path) -> None:
    """An older checkpoint that verifies must not be taken in place of a newer-format one:
    the records between them are only in the newer file (and a newer WAL)."""
    state = a_state()
    write_checkpoint(checkpoint_dir(tmp_path), copy_state(state, 50))
    write_file(checkpoint_dir(tmp_path) / checkpoint_name(99), state, 9, pack_records)
    with pytest.raises(NewerFormat, match="newer format 9"):
        recover(tmp_path)
    report = check(tmp_path)
    assert report.newer and not any("DAMAGED" in line for line in report.checkpoints)


def test_a_controller_refuses_to_start_on_a_newer_wal(tmp_path: Path) -> None:
    """A real `xce controller` on a state directory whose segment claims format 99: it exits
    with one line naming both formats, and the log is left as it was."""
    import asyncio

    from tests.integration.cluster import Cluster

    cluster = Cluster(tmp_path / "c")
    state_dir = cluster.root / "controller"
    asyncio.run(write(state_dir, events(5), preallocate=False))
    seg = _newer_segment(state_dir)
    before = seg.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "xce", "controller", "-c", str(cluster._config())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "newer format" in line]
    assert len(lines) == 1 and "newer format 99" in lines[0], done.stderr
    assert f"reads ≤ {WAL_FORMAT}" in lines[0] and "damage" not in lines[0]
    assert seg.read_bytes() == before
    assert not [p for p in wal_dir(state_dir).iterdir() if ".broken" in p.name]
    shutil.rmtree(cluster.jobs_root, ignore_errors=True)
