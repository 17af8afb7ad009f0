"""One reader of typed times (xce/core/timespec.py) behind `--begin`, `xce rsv` and `xce acct`
/ the accounting API: the same forms and one zone rule (local on the command line, UTC in
the API), where before three parsers disagreed (rsv read UTC on the command line)."""

from __future__ import annotations

import calendar
import os
import time
from collections.abc import Iterator

import pytest
import typer

from xce.api.accounting import parse_time as acct_query_time
from xce.cli import acct
from xce.cli.rsv import parse_moment
from xce.core.begin import parse_begin
from xce.core.errors import InvalidRequest
from xce.core.timespec import parse_time

NOW = float(calendar.timegm((2026, 12, 4, 10, 0, 0)))  # 05:00 in New York
DECEMBER = float(calendar.timegm((2026, 12, 1, 0, 0, 0)))


@pytest.fixture
def new_york() -> Iterator[None]:
    """A local zone that is not UTC, so local and UTC readings differ."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.usefixtures("new_york")
def test_the_command_lines_read_a_date_in_local_time_alike() -> None:
    local = time.mktime((2026, 12, 5, 8, 0, 0, 0, 0, -1))
    assert local == calendar.timegm((2026, 12, 5, 13, 0, 0))
    assert parse_begin("2026-12-05T08:00", NOW, local=True) == local
    assert parse_moment("--start", "2026-12-05T08:00", NOW) == local
    assert acct._moment("-S", "2026-12-05T08:00") == repr(local)
    # the API reads the same text in UTC
    assert parse_begin("2026-12-05T08:00", NOW) == calendar.timegm((2026, 12, 5, 8, 0, 0))
    assert acct_query_time("since", "2026-12-05T08:00", NOW) == calendar.timegm(
        (2026, 12, 5, 8, 0, 0)
    )


@pytest.mark.parametrize(
    ("text", "ahead", "behind"),
    [
        ("now", NOW, NOW),
        ("+2h", NOW + 7200, NOW + 7200),
        ("now+30m", NOW + 1800, NOW + 1800),
        ("1796371200", 1796371200.0, 1796371200.0),
        ("2026-12", DECEMBER, DECEMBER),
        ("11:00", NOW + 3600, NOW + 3600 - 86400),  # ahead today; looking back: yesterday
        ("09:00", NOW + 23 * 3600, NOW - 3600),  # passed: tomorrow; looking back: today
    ],
)
def test_the_forms_are_the_same_everywhere(text: str, ahead: float, behind: float) -> None:
    assert parse_time(text, NOW, local=False) == ahead
    assert parse_begin(text, NOW) == ahead
    assert parse_time(text, NOW, local=False, past=True) == behind
    assert acct_query_time("until", text, NOW) == behind


def test_ages_only_where_a_time_looking_back_is_expected() -> None:
    assert acct_query_time("since", "30d", NOW) == NOW - 30 * 86400
    assert parse_time("now-2h", NOW, local=False, past=True) == NOW - 7200
    for text in ("30d", "now-5"):
        with pytest.raises(InvalidRequest, match="begin time"):
            parse_begin(text, NOW)


@pytest.mark.parametrize("text", ["soon", "nan", "inf", "-5", "1e400", "12:61", "2026-13", ""])
def test_a_bad_time_names_what_it_is_for(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidRequest, match=f"query parameter since {text!r} is not a time"):
        acct_query_time("since", text, NOW)
    for command_line in (
        lambda: parse_moment("--start", text, NOW),
        lambda: acct._moment("-E", text or " "),
    ):
        with pytest.raises(typer.Exit):
            command_line()
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith(f"xce: error: --start {text!r} is not a time: use epoch")
    assert len(errors) == 2 and "-E " in errors[1] and "or an age" in errors[1]
