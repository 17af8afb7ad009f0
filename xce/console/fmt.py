"""Display formats for the tables: compact, fixed-width friendly, no colour needed."""

from __future__ import annotations

import time

# Tests set this so rendered times do not depend on the machine's time zone.
UTC = False


def _tm(epoch: float) -> time.struct_time:
    return time.gmtime(epoch) if UTC else time.localtime(epoch)


def duration(seconds: float | None) -> str:
    """`42s`, `12:05`, `3h04m`, `2d03h` (at most 6 characters); `-` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def size(n: int | float | None) -> str:
    """Bytes as `512B`, `12.3K`, `1.5G`."""
    if not n:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" or value >= 100 else f"{value:.1f}{unit}"
        value /= 1024
    return "-"


def stamp(epoch: float | None) -> str:
    """`MM-DD HH:MM` in local time."""
    if not epoch:
        return "-"
    return time.strftime("%m-%d %H:%M", _tm(epoch))


def full_stamp(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", _tm(epoch))
