"""`--begin` (sbatch --begin, bsub -b): the time forms, their validation, the scheduler's
reason while the time is ahead, and the directives that carry it."""

from __future__ import annotations

import calendar
import time

import pytest

from tests.unit.helpers import T0, new_state, submit, submit_array
from xce.cli.directives import lsf_begin
from xce.core.begin import MAX_AHEAD_S, parse_begin
from xce.core.errors import InvalidRequest
from xce.sched import snapshot_of
from xce.sched.passes.pipeline import plan

NOW = float(calendar.timegm((2026, 12, 4, 10, 0, 0)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now+60", NOW + 60),
        ("now+2hours", NOW + 7200),
        ("+30m", NOW + 1800),
        ("+1d", NOW + 86400),
        (str(NOW + 5), NOW + 5),
        (NOW + 7, NOW + 7),
        ("2026-12-05", float(calendar.timegm((2026, 12, 5, 0, 0, 0)))),
        ("2026-12-04T12:30", NOW + 2.5 * 3600),
        ("2026-12-04 12:30:15", NOW + 2.5 * 3600 + 15),
        ("11:00", NOW + 3600),  # later today (UTC in the API)
        ("09:00", NOW + 23 * 3600),  # already passed: tomorrow
        ("2020-01-01", float(calendar.timegm((2020, 1, 1, 0, 0, 0)))),  # past: at once
    ],
)
def test_begin_forms(text: str | float, expected: float) -> None:
    assert parse_begin(text, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "tomorrow-ish",
        "12:61",
        "2026-13-01",
        "now+",
        "now-5",
        "nan",
        "inf",
        "-5",
        "",
        True,
        NOW + MAX_AHEAD_S + 1,
    ],
)
def test_bad_begin_is_invalid_request_naming_it(text: str | float) -> None:
    with pytest.raises(InvalidRequest, match="begin time"):
        parse_begin(text, NOW)


def test_local_forms_follow_the_local_zone() -> None:
    assert parse_begin("2026-12-05T08:00", NOW, local=True) == time.mktime(
        (2026, 12, 5, 8, 0, 0, 0, 0, -1)
    )


def test_scheduler_holds_a_job_until_its_begin_time() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    later = submit(state, begin_time=T0 + 3600)
    now = submit(state)
    number = submit_array(state, "1-2", begin_time=T0 + 60)
    early = plan(snapshot_of(state), T0)
    assert [p.job_id for p in early.placements] == [now]
    assert early.texts()[later] == f"begin time not reached: eligible at {int(T0 + 3600)}"
    assert early.texts()[str(number)].startswith("begin time not reached")
    late = plan(snapshot_of(state), T0 + 3600)
    assert {p.job_id for p in late.placements} >= {later, now, f"{number}[1]"}


@pytest.mark.parametrize(
    ("text", "expected"), [("10:30", "10:30"), ("2027:01:02:03:04", "2027-01-02T03:04")]
)
def test_bsub_b_becomes_begin_text(text: str, expected: str) -> None:
    assert lsf_begin(text) == expected


def test_bsub_b_fills_in_this_month() -> None:
    now = time.localtime()
    assert lsf_begin("7:8:05") == f"{now.tm_year:04d}-{now.tm_mon:02d}-07T08:05"
