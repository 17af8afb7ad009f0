"""The worker's cache of array inputs: out of the jobs' reach, used only as the controller
confirms it, and never left holding a file that did not arrive whole.

The fetch functions here write into the descriptor the cache hands them, as the staging
module's download does; the real download through a controller is in
tests/integration/test_transfer_sharing_e2e.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import subprocess
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from xce.client.http import Received
from xce.worker.attempt import staging
from xce.worker.attempt.inputcache import InputCache, copy_into

DATA = os.urandom(300_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


class Controller:
    """What a controller answers for one input: its bytes, or 304 to the holder of them."""

    def __init__(self, data: bytes = DATA) -> None:
        self.data = data
        self.sent = 0
        self.asked: list[str | None] = []

    async def fetch(self, fd: int, held: str | None) -> Received:
        self.asked.append(held)
        digest = hashlib.sha256(self.data).hexdigest()
        if held == digest:
            return Received(0, digest, True, unchanged=True)
        os.write(fd, self.data)
        self.sent += len(self.data)
        return Received(len(self.data), digest, True)


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, 1 << 22, 0)
    finally:
        os.close(fd)


async def test_a_held_copy_is_used_only_as_confirmed_and_a_changed_file_replaces_it(
    tmp_path: Path,
) -> None:
    cache = InputCache(tmp_path / "cache")
    cache.reset()
    controller = Controller()
    for _ in range(3):
        assert _read(await cache.open_shared((7, "in.bin"), controller.fetch)) == DATA
    assert controller.sent == len(DATA) and controller.asked == [None, DIGEST, DIGEST]
    assert cache.fetched == 1 and cache.reused == 2
    # The controller's file is another now (a state started again, say): the copy goes.
    controller.data = b"another file"
    assert _read(await cache.open_shared((7, "in.bin"), controller.fetch)) == b"another file"
    names = sorted(p.name for p in cache.root.iterdir())
    assert names == [hashlib.sha256(b"another file").hexdigest()]


async def test_a_failed_fetch_keeps_nothing_and_the_next_task_fetches_again(
    tmp_path: Path,
) -> None:
    cache = InputCache(tmp_path / "cache")
    cache.reset()

    async def broken(fd: int, held: str | None) -> Received:
        os.write(fd, DATA[:1000])
        raise OSError("the link broke")

    with pytest.raises(OSError):
        await cache.open_shared((1, "in.bin"), broken)
    assert list(cache.root.iterdir()) == []
    controller = Controller()
    assert _read(await cache.open_shared((1, "in.bin"), controller.fetch)) == DATA
    assert controller.asked == [None]

    async def unverified(fd: int, held: str | None) -> Received:
        os.write(fd, b"no digest")
        return Received(9, hashlib.sha256(b"no digest").hexdigest(), False)

    # A controller that declares no digest: the file serves this task and is not kept.
    assert _read(await cache.open_shared((2, "in.bin"), unverified)) == b"no digest"
    assert [p.name for p in cache.root.iterdir()] == [DIGEST]


async def test_a_symlink_planted_where_the_cache_goes_is_replaced_not_followed(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("not the cache's")
    (tmp_path / "cache").symlink_to(elsewhere)
    cache = InputCache(tmp_path / "cache")
    cache.reset()
    assert (elsewhere / "keep").read_text() == "not the cache's"
    st = os.lstat(cache.root)
    assert not Path(cache.root).is_symlink() and st.st_mode & 0o777 == 0o700
    assert st.st_uid == os.geteuid()


def test_copy_into_gives_a_file_of_its_own(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.write_bytes(DATA)
    target.write_bytes(b"x" * 1_000_000)  # longer: cut to the input's size
    src = os.open(source, os.O_RDONLY)
    dst = os.open(target, os.O_WRONLY)
    try:
        assert copy_into(src, dst) == len(DATA)
    finally:
        os.close(src)
        os.close(dst)
    assert target.read_bytes() == DATA
    assert os.stat(source).st_ino != os.stat(target).st_ino


async def test_a_copy_killed_midway_never_writes_into_what_the_worker_opens_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: a user kills their own array task while its input is copied (the copy
    thread cannot be stopped). The kill closes the task's descriptors at once, and the next
    files the worker opens as root get those numbers: the thread must not write there. The
    slow copy path (another file system: copy_file_range says EXDEV) makes the window wide."""

    def cross_device(*args: object) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    big = b"U" * (64 << 20)  # the user's own input
    cache = InputCache(tmp_path / "cache")
    cache.reset()
    job = types.SimpleNamespace(assignment=types.SimpleNamespace(number=7), creds=None)

    class Client:
        async def download_to(self, url: str, writer: Any, **kwargs: Any) -> Received:
            for i in range(0, len(big), 4 << 20):
                await writer.write(big[i : i + (4 << 20)])
            return Received(len(big), hashlib.sha256(big).hexdigest(), True)

    target = os.open(tmp_path / "task-input", os.O_WRONLY | os.O_CREAT, 0o600)

    async def stage() -> None:
        try:
            await staging._copy_shared(Client(), cache, job, "in.bin", "u", {}, target)  # type: ignore[arg-type]
        finally:
            os.close(target)  # what fetch_inputs does when the kill cancels it

    task = asyncio.ensure_future(stage())
    while cache.fetched == 0:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)  # the copy thread runs
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    victim = tmp_path / "root-state"
    victim.write_bytes(b"ROOT " * 10)
    fd = os.open(victim, os.O_RDWR)  # takes the number the task's target had
    try:
        for _ in range(200):  # until the copy thread has ended
            if not _copying():
                break
            await asyncio.sleep(0.05)
    finally:
        os.close(fd)
    assert victim.read_bytes() == b"ROOT " * 10


def _copying() -> bool:
    return any(t.name == "xce-as-user" for t in threading.enumerate())


async def test_a_held_copy_taken_away_while_the_controller_is_asked_is_fetched_again(
    tmp_path: Path,
) -> None:
    """Another array's expiry or eviction may delete a held copy while a task waits for the
    controller's 304; the task keeps the descriptor it opened before asking."""
    cache = InputCache(tmp_path / "cache")
    cache.reset()
    controller = Controller()
    first = await cache.open_shared((1, "in"), controller.fetch)
    os.close(first)

    async def confirm_while_evicted(fd: int, held: str | None) -> Received:
        for name in os.listdir(cache.root):  # what another task's eviction does meanwhile
            os.unlink(cache.root / name)
        return await controller.fetch(fd, held)

    second = await cache.open_shared((1, "in"), confirm_while_evicted)
    try:
        assert os.pread(second, len(DATA) + 1, 0) == DATA
    finally:
        os.close(second)
    assert controller.asked == [None, DIGEST]


@pytest.fixture
def small_fs(tmp_path: Path) -> Any:
    """A real 16 MiB file system (tmpfs) for the cache, so that its free space is what the
    test makes it; skipped where a tmpfs cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "xce-cache-test", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _ballast(path: Path, mib: float) -> None:
    """Another writer's file on the same file system (not the cache's)."""
    path.write_bytes(b"\0" * int(mib * (1 << 20)))


async def test_the_oldest_copies_go_when_the_spool_is_short_of_free_space(
    small_fs: Path,
) -> None:
    """16 MiB, of which the cache leaves 10% (1.6 MiB) free. Two 6 MiB inputs fit; then
    another writer leaves 1 MiB free, under the reserve: the next copy that arrives makes
    the cache drop its least recently used entry (the first input) until the reserve is
    free again. The dropped input is fetched whole again by its next task, the others are
    still confirmed with a 304."""
    mib = 1 << 20
    cache = InputCache(small_fs / "cache")
    cache.reset()
    first, second, third = (
        Controller(os.urandom(6 * mib)),
        Controller(os.urandom(6 * mib)),
        Controller(os.urandom(mib // 2)),
    )
    for key, controller in (((1, "a"), first), ((2, "b"), second)):
        os.close(await cache.open_shared(key, controller.fetch))
    assert cache.has_room()
    _ballast(small_fs / "other-writer", 3)  # 16 - 12 - 3: 1 MiB free, under the reserve
    assert not cache.has_room()
    assert _read(await cache.open_shared((3, "c"), third.fetch)) == third.data
    held = sorted(p.name for p in cache.root.iterdir())
    digests = [hashlib.sha256(c.data).hexdigest() for c in (second, third)]
    assert held == sorted(digests)  # the first input's copy went, the newer ones stay
    assert cache.has_room()
    # The dropped input is fetched again, whole; a kept one is confirmed, not sent again.
    again = await cache.open_shared((1, "a"), first.fetch)
    try:
        assert os.pread(again, 7 * mib, 0) == first.data
    finally:
        os.close(again)
    assert first.asked == [None, None] and first.sent == 2 * len(first.data)
    os.close(await cache.open_shared((3, "c"), third.fetch))
    assert third.asked == [None, hashlib.sha256(third.data).hexdigest()]
