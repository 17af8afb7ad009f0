"""What the familiar commands print: state letters, reasons, times, job ids, `%` formats and
fixed columns (xce/cli/compat/formats.py), as tables."""

from __future__ import annotations

import time

import pytest

from xce.cli.compat import formats
from xce.sched import reasons

STATES = [
    # XCE state, reason -> squeue %t, %T; qstat S
    ("PEND", "", "PD", "PENDING", "Q"),
    ("PSUSP", "", "PD", "PENDING", "H"),
    ("RUN", "", "R", "RUNNING", "R"),
    ("USUSP", "", "S", "SUSPENDED", "S"),
    ("SSUSP", "", "S", "SUSPENDED", "S"),
    ("DONE", "", "CD", "COMPLETED", "F"),
    ("EXIT", "", "F", "FAILED", "F"),
    ("EXIT", "killed", "CA", "CANCELLED", "F"),
    ("EXIT", "walltime limit exceeded", "TO", "TIMEOUT", "F"),
    ("EXIT", "memory limit of 100 MB exceeded", "OOM", "OUT_OF_MEMORY", "F"),
    ("EXIT", "killed (host unavailable)", "NF", "NODE_FAIL", "F"),
    ("EXIT", "killed on its host: the worker had no contact", "NF", "NODE_FAIL", "F"),
]


@pytest.mark.parametrize(("state", "reason", "short", "long", "pbs"), STATES)
def test_state_letters_and_words(state: str, reason: str, short: str, long: str, pbs: str) -> None:
    assert formats.slurm_state(state, reason) == (short, long)
    assert formats.PBS_STATE[state] == pbs


def test_every_xce_state_has_a_letter_in_each_family() -> None:
    for state in formats.ALL_STATES:
        assert formats.slurm_state(state, "")[0]
        assert formats.PBS_STATE[state]
    assert formats.slurm_state("REQUEUED") == ("RQ", "REQUEUED")


@pytest.mark.parametrize(
    ("text", "states", "letters"),
    [
        ("PD", {"PEND", "PSUSP"}, {"PD"}),
        ("pending,R", {"PEND", "PSUSP", "RUN"}, {"PD", "R"}),
        ("CA", {"EXIT"}, {"CA"}),
        ("TIMEOUT", {"EXIT"}, {"TO"}),
        ("S,CD", {"USUSP", "SSUSP", "DONE"}, {"S", "CD"}),
    ],
)
def test_squeue_state_filters(text: str, states: set[str], letters: set[str]) -> None:
    assert formats.slurm_state_filter(text) == (states, letters)


def test_state_filter_all_and_unknown() -> None:
    assert formats.slurm_state_filter("PD,all") is None
    with pytest.raises(ValueError, match="'XX'"):
        formats.slurm_state_filter("R,XX")


# The scheduler's own texts: a rewording there must show up here.
REASONS = [
    ("PEND", str(reasons.ROOM), "Resources"),
    ("PEND", str(reasons.devices((("gpu", "2"),))), "Resources"),
    ("PEND", str(reasons.license_short("matlab", 2, 0)), "Licenses"),
    ("PEND", str(reasons.TOO_BIG), "BadConstraints"),
    ("PEND", str(reasons.too_few_devices("gpu", 9, 2)), "BadConstraints"),
    ("PEND", str(reasons.NO_MATCH), "ReqNodeNotAvail"),
    ("PEND", str(reasons.NO_HOST), "ReqNodeNotAvail"),
    ("PEND", str(reasons.begin(1.0e9)), "BeginTime"),
    ("PEND", str(reasons.DEPENDENCY), "Dependency"),
    ("PEND", str(reasons.DEPENDENCY_NEVER), "DependencyNeverSatisfied"),
    ("PEND", str(reasons.queue_inactive("q")), "PartitionInactive"),
    ("PEND", str(reasons.queue_limit("q", 3)), "PartitionJobLimit"),
    ("PEND", str(reasons.user_limit("u", "q", 3)), "QOSMaxJobsPerUserLimit"),
    ("PEND", str(reasons.ARRAY_LIMIT), "JobArrayTaskLimit"),
    ("PEND", str(reasons.reservation_pending("r", 5.0)), "Reservation"),
    ("PEND", str(reasons.reservation_ended("r")), "Reservation"),
    ("PEND", "", "None"),
    ("PEND", "something new", "Priority"),
    ("PSUSP", str(reasons.ROOM), "JobHeldUser"),
]


@pytest.mark.parametrize(("state", "text", "code"), REASONS)
def test_reasons_become_slurm_codes(state: str, text: str, code: str) -> None:
    assert formats.slurm_reason(state, text) == code


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "0:00"), (0, "0:00"), (5, "0:05"), (754, "12:34"), (3723, "1:02:03"),
     (3 * 86400 + 4 * 3600 + 5 * 60 + 6, "3-04:05:06"), (-3, "0:00")],
)  # fmt: skip
def test_slurm_durations(seconds: float | None, text: str) -> None:
    assert formats.slurm_duration(seconds) == text


def test_limits_and_clock_times() -> None:
    assert formats.slurm_limit(None) == "UNLIMITED"
    assert formats.slurm_limit(0, "infinite") == "infinite"
    assert formats.slurm_limit(600) == "10:00"
    at = time.mktime((2026, 3, 4, 10, 51, 2, 0, 0, -1))
    assert formats.slurm_timestamp(at) == "2026-03-04T10:51:02"
    assert formats.slurm_timestamp(None) == "Unknown"
    assert formats.lsf_time(at) == "Mar  4 10:51"
    assert formats.hms(3600 * 101 + 61) == "101:01:01"
    assert formats.hms(None) == "00:00:00"


@pytest.mark.parametrize(
    ("xce_id", "slurm"),
    [("17", "17"), ("17[5]", "17_5"), ("17[3-10]", "17_[3-10]"), ("17[1,4-6]", "17_[1,4-6]")],
)
def test_slurm_job_ids(xce_id: str, slurm: str) -> None:
    assert formats.slurm_job_id(xce_id) == slurm


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("17", ["17"]),
        ("17_5", ["17[5]"]),
        ("17[5]", ["17[5]"]),
        ("17_[1-3]", ["17[1]", "17[2]", "17[3]"]),
        ("17_[1,4]", ["17[1]", "17[4]"]),
        ("17[1-2]", ["17[1]", "17[2]"]),
        ("17[]", ["17"]),
        ("17.server", ["17"]),
        ("17[]", ["17"]),
        ("17[3].pbs.example.org", ["17[3]"]),
        (" 42 ", ["42"]),
    ],
)
def test_job_ids_as_users_write_them(text: str, ids: list[str]) -> None:
    assert formats.xce_job_ids(text) == ids


@pytest.mark.parametrize("text", ["", "abc", "17_", "17_x", "x_3", "17[a]", "17_[3-]", "-1"])
def test_bad_job_ids_are_refused_naming_them(text: str) -> None:
    with pytest.raises(ValueError, match="invalid job id"):
        formats.xce_job_ids(text)


def test_squeue_default_format_lays_out_like_squeue() -> None:
    headers = {"i": "JOBID", "P": "PARTITION", "j": "NAME", "t": "ST", "R": "NODELIST(REASON)"}
    fields = formats.parse_format("%.18i %.9P %.8j %.2t %R", headers)
    row = {"i": "12_3", "P": "normal", "j": "averyverylongname", "t": "PD", "R": "(Resources)"}
    lines = formats.render_format(fields, headers, [row])
    assert lines == [
        "             JOBID PARTITION     NAME ST NODELIST(REASON)",
        "              12_3    normal averyver PD (Resources)",
    ]
    assert formats.render_format(fields, headers, [row], header=False) == lines[1:]


def test_format_widths_literal_text_and_percent() -> None:
    headers = {"i": "JOBID", "u": "USER", "P": "PARTITION"}
    fields = formats.parse_format("id=%i|%u%%|%#P", headers)
    rows = [{"i": "1", "u": "alice", "P": "a"}, {"i": "22", "u": "bo", "P": "longer"}]
    assert formats.render_format(fields, headers, rows, header=False) == [
        "id=1|alice%|a        ",  # %#P: as wide as the widest value or its header
        "id=22|bo%|longer   ",
    ]
    left = formats.parse_format("%5u.", headers)
    assert formats.render_format(left, headers, [{"u": "ab"}], header=False) == ["ab   ."]


@pytest.mark.parametrize("text", ["%Z", "%.18", "%", "%-5i"])
def test_unknown_format_letters_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        formats.parse_format(text, {"i": "JOBID"})


def test_columns_grow_to_their_values_and_cut_with_a_mark() -> None:
    columns = [formats.Column("JOBID", 7), formats.Column("N", 3, right=True), formats.Column("X")]
    lines = formats.render_columns(columns, [["1", "22", "last"], ["12345678", "1", "y"]])
    assert lines == ["JOBID      N X", "1         22 last", "12345678   1 y"]
    ruled = formats.render_columns(
        [formats.Column("JobID", 5, right=True), formats.Column("State", 4, right=True)],
        [["1", "CANCELLED"]],
        rule=True,
        cut="+",
    )
    assert ruled == ["JobID Stat", "----- ----", "    1 CAN+"]


def test_hosts_and_queues_as_slurm_and_lsf_see_them() -> None:
    host = {"status": "online", "admin": "open", "slots": 4, "slots_used": 0}
    assert formats.sinfo_node_state(host) == "idle"
    assert formats.sinfo_node_state({**host, "slots_used": 2}) == "mix"
    assert formats.sinfo_node_state({**host, "slots_used": 4}) == "alloc"
    assert formats.sinfo_node_state({**host, "admin": "closed"}) == "drain"
    assert formats.sinfo_node_state({**host, "admin": "draining", "slots_used": 1}) == "drng"
    assert formats.sinfo_node_state({**host, "status": "unavailable"}) == "down*"
    assert formats.lsf_host_status(host) == "ok"
    assert formats.lsf_host_status({**host, "slots_used": 4}) == "closed"
    assert formats.lsf_host_status({**host, "admin": "closed"}) == "closed"
    assert formats.lsf_host_status({**host, "status": "unavailable"}) == "unavail"
    assert formats.sinfo_avail({"open": True, "active": True}) == "up"
    assert formats.sinfo_avail({"open": False, "active": True}) == "drain"
    assert formats.sinfo_avail({"open": True, "active": False}) == "down"
    assert formats.sinfo_avail({"open": False, "active": False}) == "inact"
    job = {"hosts": [{"host": "n1", "slots": 2}, {"host": "n2", "slots": 2}], "host": "n1"}
    assert formats.host_names(job) == ["n1", "n2"]
    assert formats.host_names({"hosts": [], "host": "n3"}) == ["n3"]
