"""A body streamed into the store over several batches: its writer and hasher lanes keep the
bytes in order, and a body that fails (a full disk, a wrong digest, a refusal) leaves
nothing behind, whichever lane was holding a batch."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from xce.core.errors import DigestMismatch, TooLarge, Unavailable
from xce.store.fileio import Threads
from xce.store.incoming import BATCH, receive
from xce.store.lane import Lane

MIB = 1 << 20


async def _pieces(data: bytes, size: int = 200_000) -> AsyncIterator[bytes]:
    """`data` in pieces of an odd size, so batches end inside pieces."""
    for start in range(0, len(data), size):
        yield data[start : start + size]
        await asyncio.sleep(0)


def _count(total: int, chunk: int) -> None:
    return None


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file())


@pytest.fixture
def threads() -> Iterator[Threads]:
    pool = Threads(2)
    yield pool
    pool.close()


async def test_a_body_of_many_batches_is_kept_whole_with_its_digest(
    tmp_path: Path, threads: Threads
) -> None:
    data = os.urandom(5 * BATCH + 4321)
    want = hashlib.sha256(data).hexdigest()
    target = tmp_path / "f.bin"
    stored = await receive(threads, tmp_path, target, _pieces(data), _count, "f.bin", want)
    assert (stored.size, stored.sha256) == (len(data), want)
    assert target.read_bytes() == data


async def test_a_wrong_digest_over_many_batches_keeps_nothing(
    tmp_path: Path, threads: Threads
) -> None:
    data = os.urandom(4 * BATCH + 1)
    with pytest.raises(DigestMismatch, match=r"f\.bin"):
        await receive(
            threads, tmp_path, tmp_path / "f.bin", _pieces(data), _count, "f.bin", "0" * 64
        )
    assert _left(tmp_path) == []


async def test_a_body_refused_midway_keeps_nothing(tmp_path: Path, threads: Threads) -> None:
    def count(total: int, chunk: int) -> None:
        if total > 3 * BATCH:
            raise TooLarge("f.bin: over the limit")

    data = os.urandom(6 * BATCH)
    with pytest.raises(TooLarge):
        await receive(threads, tmp_path, tmp_path / "f.bin", _pieces(data), count, "f.bin")
    assert _left(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
async def test_a_disk_that_fills_midway_is_unavailable_and_keeps_nothing(
    tmp_path: Path, threads: Threads
) -> None:
    """The writer's lane meets ENOSPC on a real 4 MiB tmpfs while the hasher's runs on:
    the body is refused as `Unavailable` naming the file, the temporary file is gone and
    the disk is empty again."""
    root = tmp_path / "small"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(root)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        data = os.urandom(12 * MIB)
        with pytest.raises(Unavailable, match=r"cannot store f\.bin: No space left on device"):
            await receive(threads, root, root / "f.bin", _pieces(data), _count, "f.bin")
        assert _left(root) == []
        assert os.statvfs(root).f_bfree == os.statvfs(root).f_blocks
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


async def test_a_lane_steps_in_order_and_keeps_its_first_failure() -> None:
    seen: list[int] = []

    def step(n: int) -> None:
        if n == 7:
            raise OSError("seven")
        seen.append(n)

    lane: Lane[int] = Lane(step, depth=2)
    with pytest.raises(OSError, match="seven"):
        for n in range(50):
            await lane.put(n)
        await lane.finish()
    assert seen == list(range(7))  # nothing after the failure
    lane.stop()
    await asyncio.wrap_future(lane.done)


async def test_a_stopped_lane_drops_what_is_queued() -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def step(n: int) -> None:
        started.set()
        release.wait(10)
        seen.append(n)

    lane: Lane[int] = Lane(step, depth=4)
    for n in range(4):
        await lane.put(n)
    await asyncio.to_thread(started.wait, 10)
    lane.stop()
    release.set()
    await asyncio.wrap_future(lane.done)
    assert seen == [0]  # the batch in hand ends; the three queued behind it never run
