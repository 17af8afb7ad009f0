"""Display formats for the tables: compact, fixed-width friendly, no colour needed."""

from __future__ import annotations

import time


def duration(seconds: float | None) -> str:
    """`42s`, `12:05`, `3:04:05`, `2d03h`; `-` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 86400:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
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
    return time.strftime("%m-%d %H:%M", time.localtime(epoch))


def full_stamp(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
