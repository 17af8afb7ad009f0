"""The one reader of times users type: `--begin`, `xce rsv --start/--end`, `xce acct -S/-E`
and the API's `begin`, `since` and `until`.

One rule, Slurm's (`parse_time(str, past)` behind sbatch --begin, scontrol and sacct):
wall-clock forms are read in the local time zone where they are typed. The command line
reads them in the user's local time and sends epoch seconds; the API, which has no user's
time zone, reads text in UTC (`local=False`). The forms:

- epoch seconds (`1796371200`);
- `now`, and `now+N` / `+N` with a unit `s|m|h|d|w` (seconds when none): N after now;
- `YYYY-MM-DD[THH:MM[:SS]]` (a space for the T too) and `YYYY-MM` (its first day);
- `HH:MM[:SS]`: the next such time of day (today, or tomorrow once passed);
- only where a time in the past is expected (`past=True`: accounting bounds): an age `N<unit>`
  or `now-N[unit]` (N before now), and `HH:MM[:SS]` is the latest such time (today, or
  yesterday when it is still ahead), as sacct reads them.

Pure: the current time is passed in; a bad time is an `InvalidRequest` naming what it is.
"""

from __future__ import annotations

import calendar
import math
import re
import time

from xce.core.errors import InvalidRequest

_UNITS = r"(s|sec|seconds?|m|min|minutes?|h|hours?|d|days?|w|weeks?)"
_AHEAD = re.compile(rf"^(?:now)?\s*\+\s*(\d+)\s*{_UNITS}?$", re.IGNORECASE)
_AGO = re.compile(rf"^(?:now\s*-\s*(\d+)\s*{_UNITS}?|(\d+)\s*{_UNITS})$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%Y-%m")
_CLOCK_FORMATS = ("%H:%M:%S", "%H:%M")
# Epoch seconds past this (the year 36812) are a typo, not a time.
MAX_EPOCH = 2.0**40
FORMS = (
    "epoch seconds, YYYY-MM-DD[THH:MM[:SS]], YYYY-MM, HH:MM[:SS], now, "
    "now+N[s|m|h|d|w] or +N[s|m|h|d|w]"
)
PAST_FORMS = f"{FORMS}, or an age N[s|m|h|d|w] (N before now)"


def help_text(past: bool = False) -> str:
    """The forms, for error messages and --help."""
    return PAST_FORMS if past else FORMS


def parse_time(
    text: str | float | int, now: float, *, local: bool, past: bool = False, what: str = "time"
) -> float:
    """Epoch seconds for `text` (the module docstring's forms); `InvalidRequest` saying
    "`what` 'text' is not a time: use ..." otherwise. `local`: wall-clock forms in the local
    time zone (the command line), else UTC (the API). `past`: ages are accepted and a
    time of day means its latest occurrence."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise _not_a_time(what, text, past)
    if isinstance(text, int | float):
        return _epoch(float(text), what, text, past)
    raw = text.strip()
    if raw.lower() == "now":
        return now
    ahead = _AHEAD.match(raw)
    if ahead:
        return now + int(ahead.group(1)) * _unit(ahead.group(2))
    ago = _AGO.match(raw) if past else None
    if ago:
        count, unit = (ago.group(1), ago.group(2)) if ago.group(1) else (ago.group(3), ago.group(4))
        return now - int(count) * _unit(unit)
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        return _epoch(value, what, raw, past)
    to_epoch = time.mktime if local else calendar.timegm
    for fmt in _DATE_FORMATS:
        try:
            parsed = time.strptime(raw.replace(" ", "T"), fmt)
        except ValueError:
            continue
        return float(to_epoch(parsed))
    for fmt in _CLOCK_FORMATS:
        try:
            clock = time.strptime(raw, fmt)
        except ValueError:
            continue
        return _time_of_day(clock, now, local, past)
    raise _not_a_time(what, raw, past)


def _unit(name: str | None) -> int:
    return _SECONDS[(name or "s")[0].lower()]


def _epoch(value: float, what: str, text: object, past: bool) -> float:
    if not math.isfinite(value) or not 0 <= value < MAX_EPOCH:
        raise _not_a_time(what, text, past)
    return value


def _time_of_day(clock: time.struct_time, now: float, local: bool, past: bool) -> float:
    """Today at `clock`; tomorrow when that has passed, or (`past`) yesterday when it is
    still ahead. Day overflow (the 32nd) is normalised by mktime/timegm."""
    to_epoch = time.mktime if local else calendar.timegm
    day = time.localtime(now) if local else time.gmtime(now)

    def on(offset: int) -> float:
        fields = (day.tm_year, day.tm_mon, day.tm_mday + offset)
        clock_fields = (clock.tm_hour, clock.tm_min, clock.tm_sec, 0, 0, -1)
        return float(to_epoch((*fields, *clock_fields)))

    when = on(0)
    if past and when > now:
        return on(-1)
    if not past and when <= now:
        return on(1)
    return when


def _not_a_time(what: str, text: object, past: bool) -> InvalidRequest:
    return InvalidRequest(f"{what} {text!r} is not a time: use {help_text(past)}")
