"""The controller's in-memory output tails and the tail route's byte window (pure)."""

from __future__ import annotations

import base64

from xce.api.jobs import tail_window
from xce.controller.tails import OutputTails
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.core.state import ClusterState


def _state(jobs: int = 1) -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    state.apply(ev.HostRegistered(0.0, "w1", 8, 1000))
    for n in range(1, jobs + 1):
        state.apply(ev.JobSubmitted(1.0, n, JobSpec("alice", "normal", command="x")))
        state.apply(ev.JobStarted(2.0, str(n), "w1"))
    return state


def test_chunks_append_resends_overlap_and_gaps_restart() -> None:
    tails = OutputTails(_state())
    tails.accept("1", 0, "stdout", 0, b"hello ")
    tails.accept("1", 0, "stdout", 6, b"world\n")
    assert tails.snapshot("1", 0, "stdout") == (0, b"hello world\n")
    tails.accept("1", 0, "stdout", 6, b"world\nmore")  # a resend that carries new bytes
    tails.accept("1", 0, "stdout", 0, b"hello")  # a resend with nothing new
    assert tails.snapshot("1", 0, "stdout") == (0, b"hello world\nmore")
    tails.accept("1", 0, "stdout", 100, b"later")  # the worker skipped ahead
    assert tails.snapshot("1", 0, "stdout") == (100, b"later")
    assert tails.snapshot("1", 0, "stderr") == (0, b"")
    assert tails.snapshot("1", 1, "stdout") == (0, b"")  # another attempt
    assert tails.size == 5


def test_each_stream_keeps_its_last_bytes_and_the_total_is_bounded() -> None:
    tails = OutputTails(_state(3), keep_bytes=10, total_bytes=25)
    tails.accept("1", 0, "stdout", 0, b"0123456789abcdef")
    assert tails.snapshot("1", 0, "stdout") == (6, b"6789abcdef")
    tails.accept("2", 0, "stdout", 0, b"x" * 10)
    tails.accept("1", 0, "stderr", 0, b"e" * 4)
    assert tails.size == 24
    tails.accept("3", 0, "stdout", 0, b"y" * 10)  # over the total: job 2 was written least
    assert set(tails.jobs) == {"1", "3"} and tails.size == 24
    tails.accept("1", 1, "stdout", 0, b"new")  # a new attempt replaces the old buffers
    assert tails.snapshot("1", 1, "stdout") == (0, b"new") and tails.size == 13


def test_tails_are_dropped_when_the_job_stops_being_active() -> None:
    state = _state(2)
    tails = OutputTails(state)
    for job_id in ("1", "2"):
        tails.accept(job_id, 0, "stdout", 0, b"out")
    for event in (ev.JobSuspended(3.0, "1"), ev.JobUsageReported(3.0, "2", 0, Usage())):
        state.apply(event)
        tails.observe(event)
    assert set(tails.jobs) == {"1", "2"}  # suspended is still active
    for event in (ev.JobFinished(4.0, "1", 0, 0), ev.JobRequeued(4.0, "2")):
        state.apply(event)
        tails.observe(event)
    assert tails.jobs == {} and tails.size == 0


def test_heartbeat_reports_are_taken_only_from_the_host_running_the_attempt() -> None:
    tails = OutputTails(_state())
    owned = {("w1", "1", 0)}

    def owns(host: str, job_id: str, attempt: int) -> object:
        return object() if (host, job_id, attempt) in owned else None

    def item(job_id: str, attempt: int, data: str, offset: int = 0) -> dict:
        return {
            "job_id": job_id,
            "attempt": attempt,
            "output": {"stdout": {"offset": offset, "data": data}},
        }

    good = base64.b64encode(b"line\n").decode()
    assert tails.accept_reports("w2", [item("1", 0, good)], owns) == 0
    assert tails.accept_reports("w1", [item("1", 1, good)], owns) == 0
    assert tails.accept_reports("w1", [item("1", 0, "!!not base64!!")], owns) == 0
    assert (
        tails.accept_reports("w1", [{"job_id": "1", "attempt": 0}, item("1", 0, good)], owns) == 5
    )
    assert tails.snapshot("1", 0, "stdout") == (0, b"line\n")


def _window(
    data: bytes, requested: int | None, limit: int, running: bool = False, first: int = 0
) -> dict:
    return tail_window(
        first,
        first + len(data),
        requested,
        limit,
        running,
        lambda a, b: data[a - first : b - first],
    )


def test_window_from_an_offset_the_latest_bytes_and_truncation() -> None:
    data = b"0123456789"
    assert _window(data, 3, 4) == {
        "offset": 3,
        "next_offset": 7,
        "end": 10,
        "truncated": False,
        "data": "3456",
    }
    assert _window(data, None, 4)["data"] == "6789"
    assert _window(data, 10, 4)["data"] == "" and _window(data, 10, 4)["next_offset"] == 10
    held = _window(data, 2, 100, first=5)  # bytes 5..14 held; 2..4 were dropped
    assert (held["offset"], held["truncated"], held["data"]) == (5, True, "0123456789")
    assert _window(data, None, 100, first=5)["truncated"] is True
    ahead = _window(data, 50, 4, running=True)  # a reader ahead of a new controller
    assert (ahead["offset"], ahead["next_offset"], ahead["data"]) == (50, 50, "")
    assert _window(data, 50, 4)["offset"] == 10  # a file: the reader is told its end


def test_window_never_splits_a_utf8_character() -> None:
    text = "añ€😀z".encode()  # 1, 2, 3, 4 and 1 bytes
    # A limit ending inside a character completes it from what is held.
    assert _window(text, 0, 2)["data"] == "añ" and _window(text, 0, 2)["next_offset"] == 3
    # While the job runs, a character whose rest has not arrived waits for the next answer.
    part = text[:5]  # "añ" + the first two bytes of "€"
    live = _window(part, 0, 100, running=True)
    assert live["data"] == "añ" and live["next_offset"] == 3
    # A start the server chooses skips stray continuation bytes.
    latest = _window(text, None, 5)
    assert latest["data"] == "😀z" and latest["offset"] == 6
    # A finished file that really ends mid-character shows a replacement character.
    assert _window(part, 0, 100)["data"] == "añ\ufffd"
