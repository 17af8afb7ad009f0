"""Inputs that an array's tasks share, fetched once per host.

Why: an array of a thousand tasks with one 1 GiB input used to cost the controller a
thousand 1 GiB answers, one per task, though the tasks on one host all want the same
bytes. The controller stores an array's inputs once (under the array's number), so the
worker keeps the first task's verified copy and gives every later task on this host a copy
of it; the controller then serves the file once per host.

What is promised:

* the copies live in `<spool>/input-cache/` (0700, root's, never in a job's tree), named by
  their SHA-256; a job cannot reach them, so what one task does to its own input (its
  copy, never a link to the cached file) no other task sees;
* a copy is used only while the controller says it is still the input: each task asks with
  `If-None-Match: "<sha256>"` (a 304 with no body, outside the controller's transfer
  slots), so a copy never outlives what it was taken of, even across a controller whose
  numbers started again;
* one fetch per (array, input) at a time (a lock per key): tasks that start together wait
  for the first one's copy instead of each fetching the file;
* the cache gives way: an entry nobody used for `KEEP_S` goes, older entries go when the
  spool's file system has less than `RESERVE_FRACTION` free, and a file that would leave it
  with less is used for the task that fetched it and not kept. It starts empty (`reset`)
  each time the worker starts.

Only the cache's bookkeeping is here; the download itself (streamed, resumed, verified) and
the copy into the job's tree as the job's user are the staging module's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from xce.client.http import Received

log = logging.getLogger("xce.worker.staging")

CACHE_DIR = "input-cache"
KEEP_S = 900.0  # an entry no task used for this long is removed
RESERVE_FRACTION = 0.10  # the share of the spool's file system the cache leaves free

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# fetch(write descriptor, SHA-256 of the copy held or None) -> what was received; the
# descriptor is left untouched when the answer is `unchanged`.
Fetch = Callable[[int, str | None], Awaitable[Received]]
Key = tuple[int, str]  # (the array's number, the input's path)


@dataclass
class _Entry:
    sha256: str
    size: int
    used: float  # time.monotonic() of the last task that took it


class InputCache:
    """The worker's copies of array inputs, keyed by (array number, input path)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._entries: dict[Key, _Entry] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self.fetched = 0  # files fetched into the cache
        self.reused = 0  # tasks given a cached copy the controller confirmed

    def reset(self) -> None:
        """Start empty, in a directory only root reaches (a symlink there is refused)."""
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.lstat(self.root).st_mode):
                os.unlink(self.root)
            else:
                shutil.rmtree(self.root)
        os.mkdir(self.root, 0o700)
        os.chmod(self.root, 0o700, follow_symlinks=False)
        self._entries.clear()

    def _path(self, sha256: str) -> Path:
        return self.root / sha256

    async def open_shared(self, key: Key, fetch: Fetch) -> int:
        """A read descriptor (the caller closes it) of a verified copy of the input `key`:
        the one held, if the controller confirms it, else one fetched now by `fetch`."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            # On the loop's thread (the entries are the loop's): a few unlinks at most.
            self._expire(time.monotonic())
            self._prune_locks(key)
            entry = self._entries.get(key)
            held = self._open_held(key, entry) if entry is not None else None
            if held is None:
                entry = None
            tmp = self.root / f".part-{secrets.token_hex(8)}"
            fd = os.open(tmp, _NEW, 0o600)
            try:
                try:
                    got = await fetch(fd, entry.sha256 if entry is not None else None)
                finally:
                    os.close(fd)
                if got.unchanged and entry is not None and held is not None:
                    entry.used = time.monotonic()
                    self.reused += 1
                    reused, held = held, None
                    return reused
                reader = os.open(tmp, _READ)
                if not got.verified:
                    return reader  # no digest from the controller: nothing to name it by
                self.fetched += 1
                if entry is not None:
                    self._drop(key)  # the controller's file is another now
                os.replace(tmp, self._path(got.sha256))
                self._entries[key] = _Entry(got.sha256, got.size, time.monotonic())
                if not self._make_room(key):
                    self._drop(key)  # used by this task (its descriptor), not kept
                return reader
            finally:
                if held is not None:
                    os.close(held)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _open_held(self, key: Key, entry: _Entry) -> int | None:
        """A read descriptor of the copy held for `key`, opened before the controller is
        asked (so that another task's expiry or eviction meanwhile cannot take the file
        away), or None when it is gone or not the size it was stored with (then the entry
        is dropped and the input fetched again)."""
        try:
            held = os.open(self._path(entry.sha256), _READ)
        except FileNotFoundError:
            self._entries.pop(key, None)
            return None
        if os.fstat(held).st_size != entry.size:
            os.close(held)
            self._drop(key)
            return None
        return held

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and not any(e.sha256 == entry.sha256 for e in self._entries.values()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(entry.sha256))

    def _expire(self, now: float) -> None:
        for key, entry in list(self._entries.items()):
            if now - entry.used > KEEP_S:
                self._drop(key)

    def _prune_locks(self, held: Key) -> None:
        """Forget the locks of keys with no entry that nobody holds (on the loop's thread)."""
        for key, lock in list(self._locks.items()):
            if key != held and key not in self._entries and not lock.locked():
                del self._locks[key]

    def has_room(self) -> bool:
        """Whether a new copy may go into the cache: not when the file system already has
        less free than the reserve (the task then downloads its own copy, as its user, on
        its user's quota)."""
        return not self._short_of_room()

    def _short_of_room(self) -> bool:
        try:
            fs = os.statvfs(self.root)
        except OSError as exc:
            log.warning("input cache: cannot see the free space of %s: %s", self.root, exc)
            return True
        return fs.f_bavail < fs.f_blocks * RESERVE_FRACTION

    def _make_room(self, keep: Key) -> bool:
        """Drop the least recently used entries (never `keep`) while the file system is
        short of room; False if it still is (then `keep` is not worth keeping either)."""
        for key, _ in sorted(self._entries.items(), key=lambda item: item[1].used):
            if not self._short_of_room():
                return True
            if key != keep:
                self._drop(key)
        if self._short_of_room():
            log.info("input cache: little free space in %s: not keeping a copy", self.root)
            return False
        return True


def copy_into(source: int, target: int) -> int:
    """Copy all of `source` into `target` (truncated first); the bytes copied. Meant to run
    as the job's user (fscreds.as_user): the target is the user's file, opened as the user,
    and the kernel charges the user's quota. `copy_file_range` lets the file system share
    blocks where it can (reflinks) and moves no data through user space otherwise."""
    size = os.fstat(source).st_size
    os.ftruncate(target, 0)
    offset = 0
    fast = True
    while offset < size:
        if fast:
            try:
                moved = os.copy_file_range(source, target, size - offset, offset, offset)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                fast = False
                continue
        else:
            chunk = os.pread(source, min(1 << 20, size - offset), offset)
            view = memoryview(chunk)
            moved = 0
            while view:
                written = os.pwrite(target, view, offset + moved)
                view, moved = view[written:], moved + written
        if moved == 0:
            raise OSError(errno.EIO, f"the cached input ended at {offset} of {size} bytes")
        offset += moved
    return offset
