"""`xce report --chart` and `--csv`: the rows drawn (bars over time, or one bar per key) or
written as CSV, and the options that cannot go together refused on one line."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
import typer

from xce.cli import acct
from xce.cli.report_chart import chart_text, csv_text


def _row(key: str, core_hours: float, jobs: int) -> dict[str, Any]:
    return {
        "key": key,
        "jobs": jobs,
        "attempts": jobs,
        "done": jobs,
        "exited": 0,
        "core_hours": core_hours,
        "cpu_hours": core_hours / 2,
        "avg_wait_s": 30.0,
        "max_wait_s": None,
        "cpu_eff": 0.5,
        "mem_eff": None,
    }


USERS = [_row("bob", 3.0, 4), _row("alice", 10.5, 12), _row("carol", 0.25, 1)]
DAYS = [_row("2026-12-01", 3.5, 3), _row("2026-12-02", 10.0, 12), _row("2026-12-03", 7.0, 7)]


def test_csv_has_a_header_named_after_the_grouping_and_one_line_per_row() -> None:
    lines = list(csv.reader(io.StringIO(csv_text("user", USERS))))
    assert lines[0][:3] == ["user", "jobs", "attempts"]
    assert [line[0] for line in lines[1:]] == ["bob", "alice", "carol"]
    assert lines[2][5] == "10.5" and lines[2][8] == ""  # unknown: empty, not "None"


def test_keys_are_bars_longest_first_one_line_each() -> None:
    text = chart_text("user", USERS, 80, 24, color=False)
    lines = text.splitlines()
    assert "\x1b[" not in text
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["alice", "bob", "carol"]
    bars = [line.count("█") for line in lines[1:]]
    assert bars[0] > bars[1] > bars[2]
    assert lines[1].split()[-2:] == ["10.50", "12"]
    assert all(len(line) <= 80 for line in lines)


def test_days_are_two_bar_charts_side_by_side() -> None:
    text = chart_text("day", DAYS, 80, 20, color=False)
    lines = text.splitlines()
    assert "core-hours per day" in lines[0] and "jobs per day" in lines[0]
    assert "12-02" in lines[-1] and "2026" not in lines[-1]
    assert "█" in text and "\x1b[" not in text
    assert all(len(line) <= 80 for line in lines)
    assert "\x1b[" in chart_text("month", DAYS, 80, 20, color=True)


def test_no_rows_say_so() -> None:
    assert chart_text("day", [], 80, 24, False) == "no usage in this period\n"


def _report(monkeypatch: pytest.MonkeyPatch, **options: Any) -> None:
    data = {"since": 0.0, "until": None, "rows": DAYS if options.get("by") == "day" else USERS}
    monkeypatch.setattr(acct, "call_light", lambda *a, **k: data)
    values: dict[str, Any] = {
        "by": "user",
        "user": None,
        "group": None,
        "queue": None,
        "since": "30d",
        "until": None,
        "noheader": False,
        "parsable": False,
        "as_json": False,
        "chart": False,
        "as_csv": False,
        "controller": [],
    }
    acct.report(**{**values, **options})


def test_report_writes_csv_and_charts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _report(monkeypatch, as_csv=True)
    assert capsys.readouterr().out.startswith("user,jobs,attempts")
    _report(monkeypatch, chart=True, by="day")
    out = capsys.readouterr().out
    assert out.startswith("Usage by day") and "jobs per day" in out


@pytest.mark.parametrize(
    "options",
    [
        {"chart": True, "as_csv": True},
        {"chart": True, "as_json": True},
        {"as_csv": True, "parsable": True},
        {"chart": True, "noheader": True},
    ],
)
def test_report_refuses_two_outputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], options: dict[str, Any]
) -> None:
    with pytest.raises(typer.Exit) as exited:
        _report(monkeypatch, **options)
    assert exited.value.exit_code == 2
    assert capsys.readouterr().err.count("\n") == 1
