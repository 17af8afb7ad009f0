"""`xce ... show` for people: local times, durations, host status words."""

from __future__ import annotations

import time

from xce.client.readable import host_status, iso_times, readable_job, times_in_text

AT = 1796321871.5


def _local(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def test_job_times_durations_reasons_and_history() -> None:
    job = {
        "submit_time": AT,
        "start_time": None,
        "walltime_s": 3725,
        "state": "PEND",
        "reason": "waiting for free slots or memory (host n3 reserved from 1796325471)",
        "usage": {"cpu_time_s": 90061.2, "max_rss_bytes": 3 * 1024 * 1024},
        "history": [{"at": AT, "event": "submitted", "detail": "to queue normal"}],
    }
    shown = readable_job(job)
    assert shown["submit_time"] == _local(AT) and shown["start_time"] is None
    assert shown["walltime_s"] == "1:02:05"
    assert shown["reason"].endswith(f"reserved from {_local(1796325471)})")
    assert "1796325471" not in shown["reason"]
    assert shown["usage"] == {"cpu_time_s": "1d 1:01:01", "max_rss_bytes": "3.0M"}
    assert shown["history"] == [f"{_local(AT)}  submitted  to queue normal"]
    iso = iso_times(job)["submit_time"]
    assert iso.startswith(time.strftime("%Y-%m-%dT", time.localtime(AT))) and iso[-6] in "+-"


def test_reason_numbers_that_are_not_times_stay() -> None:
    assert (
        times_in_text("user alice has reached the limit of 50 running jobs")
        == "user alice has reached the limit of 50 running jobs"
    )


def test_host_status_words() -> None:
    assert host_status({"status": "online", "admin": "open"}) == "online"
    assert host_status({"status": "offline", "admin": "closed"}) == "closed"
    assert host_status({"status": "offline", "admin": "draining"}) == "draining"
    assert host_status({"status": "offline", "admin": "drained"}) == "drained"
    assert host_status({"status": "unavailable", "admin": "closed"}) == "unavailable"
