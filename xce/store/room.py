"""Limits on what the file store takes, decided before a body is read where its size is known.

A file's size is known from its Content-Length, so a file that cannot be kept is refused
before a byte of it is read (413 `too_large`), not after gigabytes have crossed the network
and filled the disk; a body of unknown length (chunked) is counted as it streams and cut off
where it passes a limit. Every refusal is one line that names the file, its size, the limit
and the config key that sets it.

`DiskRoom` keeps `[controller] min_free_disk_mb` free on the controller's disk: a full disk
would stop the WAL, and with it every job. Bodies being received at once promise their
declared sizes, so two large uploads cannot each see room that only one of them fits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from xce.core.errors import TooLarge

MB = 1024 * 1024
_UNITS = ((1 << 40, "TB"), (1 << 30, "GB"), (MB, "MB"))


def amount(size: int) -> str:
    """Bytes for people: exact below 0.1 MB, else in MB, GB or TB with one decimal."""
    for unit, name in _UNITS:
        if size >= unit or (unit == MB and size >= MB // 10):
            return f"{size / unit:.1f} {name}"
    return f"{size} bytes"


def sized(size: int, known: bool) -> str:
    """A file's size in a refusal: its Content-Length, or what arrived before the cut."""
    return amount(size) if known else f"more than {amount(size)}"


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system of `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class DiskRoom:
    """The reserve of free disk space, across the bodies being received at once."""

    def __init__(self, path: Path, reserve: int, free: Callable[[Path], int] = free_bytes) -> None:
        self.path = path
        self.reserve = reserve
        self.free = free
        self.promised = 0  # bytes declared by bodies in progress and not written yet

    def check(self, name: str, size: int, coming: int, known: bool = True) -> None:
        """Refuse `coming` more bytes of `name` (`size`: its size, for the message) if
        they would leave less than the reserve free, after what others have promised."""
        if self.reserve <= 0 or coming <= 0:
            return
        left = self.free(self.path) - self.promised - coming
        if left < self.reserve:
            raise TooLarge(
                f"{name}: {sized(size, known)} would leave {amount(max(left, 0))} free on "
                f"the controller's disk, under the reserve of {amount(self.reserve)} "
                "([controller] min_free_disk_mb)"
            )

    def promise(self, name: str, size: int | None) -> Promise:
        """Admit a body of declared `size` (None: unknown, checked as it arrives)."""
        if size:
            self.check(name, size, size)
        return Promise(self, name, size or 0)


class Promise:
    """One body's share of `DiskRoom.promised`: what it declared and has not written."""

    def __init__(self, room: DiskRoom, name: str, size: int) -> None:
        self.room = room
        self.name = name
        self.left = size
        self.taken = 0
        room.promised += size

    def take(self, count: int) -> None:
        """`count` more bytes are about to be written: those past the declared size are
        checked against the reserve now (a body of unknown length, cut off there)."""
        covered = min(count, self.left)
        self.left -= covered
        self.room.promised -= covered
        self.taken += count
        if count > covered:
            self.room.check(self.name, self.taken, count - covered, known=False)

    def close(self) -> None:
        """The body is stored or refused: what it did not write is promised no more."""
        self.room.promised -= self.left
        self.left = 0
