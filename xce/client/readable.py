"""Records for people: local times, durations, sizes, host status words.

The API keeps epoch seconds (stable for programs); `xce ... show` prints local times
(`2026-12-03 18:05:01`) and durations (`1:02:03`), `--json` gives ISO 8601 times with the
UTC offset. Pending reasons that name a time (`host n3 reserved from 1796321118`, written by
the pure scheduler, which has no time zone) get it as a local time too.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

TIME_FIELDS = (
    "submit_time",
    "start_time",
    "end_time",
    "registered_at",
    "changed_at",
    "eligible_time",
    "begin_time",
)
_EPOCH_IN_TEXT = re.compile(r"\b(from|at|until) (1\d{9})(?:\.\d+)?\b")


def local_time(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else None


def iso_time(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds") if ts else None


def duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    s = round(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}d {text}" if days else text


def size(n: int | None) -> str | None:
    if not n:
        return None
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return str(n)


def times_in_text(text: str) -> str:
    """`... reserved from 1796321118` -> `... reserved from 2026-12-03 18:05:18`."""
    return _EPOCH_IN_TEXT.sub(lambda m: f"{m.group(1)} {local_time(float(m.group(2)))}", text)


def readable_job(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in TIME_FIELDS:
        if key in out:
            out[key] = local_time(out[key])
    if out.get("walltime_s") is not None:
        out["walltime_s"] = duration(out["walltime_s"])
    if isinstance(out.get("reason"), str):
        out["reason"] = times_in_text(out["reason"])
    usage = out.get("usage")
    if isinstance(usage, dict):
        usage = dict(usage)
        for key in list(usage):
            if key.endswith("_s"):
                usage[key] = duration(usage[key])
            elif key.endswith("_bytes"):
                usage[key] = size(usage[key])
        out["usage"] = usage
    hosts = out.get("hosts")
    if (
        isinstance(hosts, list)
        and len(hosts) > 1
        and any(isinstance(h, dict) and h.get("devices") for h in hosts)
    ):
        # a multi-host job with devices: each host with its own grant
        out["hosts"] = [
            f"{h.get('host')}*{h.get('slots')} {' '.join(h.get('devices') or [])}".rstrip()
            if isinstance(h, dict)
            else h
            for h in hosts
        ]
    history = out.get("history")
    if isinstance(history, list):
        out["history"] = [
            f"{local_time(h.get('at')) or 'time unknown'}  {h.get('event', '')}"
            f"  {times_in_text(str(h.get('detail', '')))}".rstrip()
            if isinstance(h, dict)
            else h
            for h in history
        ]
    return out


def iso_times(record: dict[str, Any]) -> dict[str, Any]:
    """The record for `--json`: times as ISO 8601 with the local offset."""
    out = dict(record)
    for key in TIME_FIELDS:
        if isinstance(out.get(key), int | float):
            out[key] = iso_time(out[key])
    return out


def host_status(host: dict[str, Any]) -> str:
    """One word like bhosts': `online` for a healthy open host, else why not: `unavailable`
    (not heard from), `closed`, `draining` (jobs still running) or `drained`."""
    if host.get("status") == "unavailable":
        return "unavailable"
    admin = host.get("admin") or "open"
    return "online" if admin == "open" else str(admin)
