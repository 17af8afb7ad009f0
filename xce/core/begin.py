"""Begin times (`sbatch --begin`, `bsub -b`) as epoch seconds: the forms and the zone are
the one rule of xce/core/timespec.py (local on the command line, as sbatch reads them; UTC
through the API); a begin time also may not be more than `MAX_AHEAD_S` ahead.

Pure: the current time is passed in.
"""

from __future__ import annotations

import math

from xce.core.errors import InvalidRequest
from xce.core.timespec import help_text, parse_time

# A begin time further away than this is a mistake (a year typed wrong), not a plan.
MAX_AHEAD_S = 366 * 86400


def parse_begin(text: str | float | int, now: float, local: bool = False) -> float:
    """Epoch seconds for `text`; `InvalidRequest` naming the problem otherwise."""
    return check_begin(parse_time(text, now, local=local, what="begin time"), now)


def check_begin(value: float, now: float) -> float:
    """A finite time, no further ahead than `MAX_AHEAD_S` (one in the past means at once)."""
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(f"begin time {value!r} is not a time: use {help_text()}")
    if value > now + MAX_AHEAD_S:
        raise InvalidRequest(
            f"begin time {value:.0f} is more than {MAX_AHEAD_S // 86400} days ahead"
        )
    return value
