"""Begin times (`sbatch --begin`, `bsub -b`): the text forms a user may give, as epoch seconds.

Pure: the current time is passed in. The API reads wall-clock forms in UTC (a server has no
user's time zone); the command line reads them in the user's local time, as sbatch does,
and sends epoch seconds.
"""

from __future__ import annotations

import calendar
import math
import re
import time

from xce.core.errors import InvalidRequest

# A begin time further away than this is a mistake (a year typed wrong), not a plan.
MAX_AHEAD_S = 366 * 86400
_RELATIVE = re.compile(
    r"^(?:now)?\s*\+\s*(\d+)\s*(s|sec|seconds?|m|min|minutes?|h|hours?|"
    r"d|days?|w|weeks?)?$",
    re.IGNORECASE,
)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d")
_CLOCK_FORMATS = ("%H:%M:%S", "%H:%M")
HELP = (
    "use epoch seconds, YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS] (today, or tomorrow once "
    "passed), now+N[s|m|h|d|w] or +N[s|m|h|d|w] (seconds when no unit)"
)


def parse_begin(text: str | float | int, now: float, local: bool = False) -> float:
    """Epoch seconds for `text`; `InvalidRequest` naming the problem otherwise."""
    if isinstance(text, bool):
        raise InvalidRequest(f"begin time {text!r} is not a time: {HELP}")
    if isinstance(text, int | float):
        return check_begin(float(text), now)
    raw = text.strip()
    if raw.lower() == "now":
        return now
    m = _RELATIVE.match(raw)
    if m:
        unit = (m.group(2) or "s")[0].lower()
        return check_begin(now + int(m.group(1)) * _UNIT[unit], now)
    try:
        return check_begin(float(raw), now)
    except ValueError:
        pass
    to_epoch = time.mktime if local else calendar.timegm
    for fmt in _DATE_FORMATS:
        try:
            parsed = time.strptime(raw.replace(" ", "T"), fmt)
        except ValueError:
            continue
        return check_begin(float(to_epoch(parsed)), now)
    for fmt in _CLOCK_FORMATS:
        try:
            clock = time.strptime(raw, fmt)
        except ValueError:
            continue
        day = time.localtime(now) if local else time.gmtime(now)
        when = float(
            to_epoch(
                (
                    day.tm_year,
                    day.tm_mon,
                    day.tm_mday,
                    clock.tm_hour,
                    clock.tm_min,
                    clock.tm_sec,
                    0,
                    0,
                    -1,
                )
            )
        )
        if when <= now:  # a time of day already past means tomorrow (sbatch)
            when = float(
                to_epoch(
                    (
                        day.tm_year,
                        day.tm_mon,
                        day.tm_mday + 1,
                        clock.tm_hour,
                        clock.tm_min,
                        clock.tm_sec,
                        0,
                        0,
                        -1,
                    )
                )
            )
        return check_begin(when, now)
    raise InvalidRequest(f"begin time {raw!r} is not a time: {HELP}")


def check_begin(value: float, now: float) -> float:
    """A finite time, no further ahead than `MAX_AHEAD_S` (one in the past means at once)."""
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(f"begin time {value!r} is not a time: {HELP}")
    if value > now + MAX_AHEAD_S:
        raise InvalidRequest(
            f"begin time {value:.0f} is more than {MAX_AHEAD_S // 86400} days ahead"
        )
    return value
