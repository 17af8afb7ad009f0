"""The listing format engine (xce/cli/fields.py): squeue `%`-specs and XCE field lists,
widths and alignment, `--noheader`, `--parsable`, and one-line errors naming a bad field."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xce.cli import fields
from xce.cli.common import print_table
from xce.cli.jobs import array_message

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times print in local time: make it UTC so the expected texts hold anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


RUNNING: dict[str, Any] = {
    "id": "7",
    "kind": "job",
    "user": "alice",
    "state": "RUN",
    "queue": "normal",
    "name": "a-very-long-job-name",
    "slots": 4,
    "memory_mb": 512,
    "walltime_s": 90000,
    "host": "w1",
    "exec_host": "2*w1:2*w2",
    "hosts": [{"host": "w1", "slots": 2}, {"host": "w2", "slots": 2}],
    "submit_time": 0.0,
    "start_time": 10.0,
    "end_time": None,
    "reason": "",
    "exit_code": None,
    "usage": {"wall_time_s": 3725.0, "cpu_time_s": 7.0, "max_rss_bytes": 3 << 20},
}
WAITING: dict[str, Any] = {
    "id": "8[2-100]",
    "kind": "array_pending",
    "array_id": "8",
    "user": "bob",
    "state": "PEND",
    "queue": "short",
    "name": "arr",
    "slots": 1,
    "host": None,
    "submit_time": 60.0,
    "start_time": None,
    "reason": "Resources",
    "usage": {"wall_time_s": 0.0},
}
ROWS = [RUNNING, WAITING]


def test_squeue_spec_right_aligns_pads_and_cuts_as_squeue() -> None:
    text = fields.render(ROWS, "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    assert text.splitlines() == [
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
        "                 7    normal a-very-l    alice  R    1:02:05      2 w1,w2",
        "          8[2-100]     short      arr      bob PD          -      - (Resources)",
    ]


def test_squeue_spec_without_dot_left_aligns_and_keeps_the_text_between_fields() -> None:
    text = fields.render(ROWS, "[%5i] %%%u|%T")
    assert text.splitlines() == [
        "[JOBID] %USER |STATE",
        "[7    ] %alice|RUN",
        "[8[2-1] %bob  |PEND",
    ]


def test_a_field_without_width_is_as_wide_as_its_widest_value() -> None:
    text = fields.render(ROWS, "id,user,state,slots")
    assert text.splitlines() == [
        "JOBID    USER  STAT SLOTS",
        "7        alice RUN  4",
        "8[2-100] bob   PEND 1",
    ]


def test_named_widths_cut_the_header_too_and_minus_right_aligns() -> None:
    text = fields.render(ROWS, "name:6 slots:-7")
    assert text.splitlines() == ["JOB_NA   SLOTS", "a-very       4", "arr          1"]


def test_bjobs_names_are_accepted_in_any_case() -> None:
    assert fields.render(ROWS, "JOBID,Stat,job_name,max_mem", header=False).splitlines() == [
        "7        RUN  a-very-long-job-name 3.0M",
        "8[2-100] PEND arr                  -",
    ]


def test_noheader_leaves_out_only_the_header_line() -> None:
    for spec in ("%.18i %.9P %j", "id,user,name:5"):
        full = fields.render(ROWS, spec)
        assert fields.render(ROWS, spec, header=False) == full.split("\n", 1)[1]
    full = fields.table(["A", "LONG"], [[1, None], ["xyz", "q"]])
    assert (
        fields.table(["A", "LONG"], [[1, None], ["xyz", "q"]], header=False)
        == (full.split("\n", 1)[1])
    )


def test_parsable_is_pipe_separated_unpadded_and_uncut() -> None:
    assert fields.render(ROWS, "%.3i  %.2j %u", parsable=True) == (
        "JOBID|NAME|USER\n7|a-very-long-job-name|alice\n8[2-100]|arr|bob\n"
    )
    assert fields.render(ROWS, "id,reason:2", header=False, parsable=True) == (
        "7|-\n8[2-100]|Resources\n"
    )
    assert fields.table(["A", "B"], [[1, ""]], parsable=True) == "A|B\n1|-\n"


def test_table_is_print_tables_layout(capsys: pytest.CaptureFixture[str]) -> None:
    headers, rows = ["JOBID", "USER", "CPU"], [["1", "alice", None], ["12[3]", "", "0:01"]]
    print_table(headers, rows)
    assert fields.table(headers, rows) == capsys.readouterr().out


def test_times_durations_and_sizes() -> None:
    line = fields.render(
        [RUNNING], "submit_time,start_time,end_time,walltime,elapsed,cpu_time,max_rss,memory"
    ).splitlines()[1]
    assert line.split() == [
        "1970-01-01T00:00:00",
        "1970-01-01T00:00:10",
        "-",
        "1-1:00:00",
        "1:02:05",
        "0:00:07",
        "3.0M",
        "512M",
    ]


def test_each_state_has_squeues_short_code() -> None:
    codes = {
        state: fields.JOB_FIELDS["st"].value({"state": state})
        for state in ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT")
    }
    assert codes == {
        "PEND": "PD",
        "PSUSP": "PD",
        "RUN": "R",
        "USUSP": "S",
        "SSUSP": "S",
        "DONE": "CD",
        "EXIT": "F",
    }


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("id,colour", "'colour'"),
        ("id user:x", "'user:x'"),
        ("%.18i %Z", "'%Z'"),
        ("%.x", "'%.x'"),
        ("%i %", "'%'"),
        ("%5%", "'%5%'"),
    ],
)
def test_an_unknown_field_is_a_one_line_error_naming_it(spec: str, named: str) -> None:
    with pytest.raises(fields.FormatError) as caught:
        fields.render(ROWS, spec)
    message = str(caught.value)
    assert "\n" not in message and f"unknown --format field {named}" in message


@pytest.mark.parametrize("spec", ["", " , ", "name:0", "%1001i", "id:" + "9" * 5000, "text"])
def test_other_bad_specs_are_refused_with_one_line(spec: str) -> None:
    with pytest.raises(fields.FormatError) as caught:
        fields.parse(spec)
    assert "\n" not in str(caught.value) and str(caught.value)


def test_every_alias_and_letter_names_a_field_and_every_field_a_value() -> None:
    assert set(fields.BJOBS_NAMES.values()) <= set(fields.JOB_FIELDS)
    assert {name for name, _ in fields.SQUEUE_LETTERS.values()} <= set(fields.JOB_FIELDS)
    for row in ({}, *ROWS):  # a sparse row (an older controller's) is not an error either
        fields.render([row], ",".join(fields.JOB_FIELDS))


def test_the_command_reference_documents_every_field_and_letter() -> None:
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name in fields.JOB_FIELDS:
        assert f"`{name}`" in text, name
    for letter in fields.SQUEUE_LETTERS:
        assert re.search(rf"`%{letter}`", text), letter
    for alias in fields.BJOBS_NAMES:
        assert f"`{alias}`" in text, alias


def test_an_arrays_own_number_names_its_tasks_in_the_listings_form() -> None:
    assert array_message("12", "1-100") == (
        "job 12 is an array: its tasks are 12[1-100] (ask for one, e.g. xce job output '12[1]')"
    )
    assert "its tasks are 4[3-9:2,20]" in array_message("4", "3-9:2,20")
    assert "xce job output '4[3]'" in array_message("4", "3-9:2,20")
