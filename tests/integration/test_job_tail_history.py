"""Live output tail (bpeek), job history and `xce job peek` on a real controller and workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN, ApiFailure, Cluster

# Prints a line, sleeps, prints another: the first must be visible while the job still runs.
TWO_LINES = "echo first-line; echo err-one >&2; sleep 4; echo second-line; sleep 0.5"


def _tail(
    cluster: Cluster, job_id: str, token: str | None = ADMIN_TOKEN, **params: Any
) -> dict[str, Any]:
    query = urllib.parse.urlencode(params)
    path = f"/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}/tail"
    return cluster.get(f"{path}?{query}" if query else path, token=token)


def _wait_tail(
    cluster: Cluster, job_id: str, needle: str, timeout: float = 20, **params: Any
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def check() -> bool:
        seen.clear()
        seen.update(_tail(cluster, job_id, **params))
        return needle in seen["data"]

    cluster.wait_for(check, timeout, f"{needle!r} in the tail of {job_id} (last {seen})")
    return seen


def _events(job: dict[str, Any]) -> list[str]:
    return [h["event"] for h in job["history"]]


def test_tail_shows_output_while_the_job_runs_then_the_file(cluster: Cluster) -> None:
    job_id = cluster.submit(command=TWO_LINES)
    first = _wait_tail(cluster, job_id, "first-line")
    assert cluster.job(job_id)["state"] == "RUN"
    assert first["running"] is True and first["state"] == "RUN"
    assert first["data"] == "first-line\n" and "second-line" not in first["data"]
    assert (first["offset"], first["next_offset"], first["truncated"]) == (0, 11, False)
    assert first["stream"] == "stdout" and first["attempt"] == 0
    err = _wait_tail(cluster, job_id, "err-one", stream="stderr")
    assert err["data"] == "err-one\n" and err["stream"] == "stderr"
    # Reading on from next_offset gives only the new bytes.
    later = _wait_tail(cluster, job_id, "second-line", offset=first["next_offset"])
    assert later["offset"] == 11 and later["data"] == "second-line\n"
    assert later["next_offset"] == 23
    cluster.wait_state(job_id, "DONE")
    done = _tail(cluster, job_id)
    assert done["running"] is False and done["state"] == "DONE"
    assert done["data"] == "first-line\nsecond-line\n" and done["truncated"] is False
    assert (done["offset"], done["next_offset"], done["end"]) == (0, 23, 23)
    assert _tail(cluster, job_id, offset=11)["data"] == "second-line\n"
    assert _tail(cluster, job_id, offset=23)["data"] == ""
    assert _tail(cluster, job_id, offset=0, limit=5)["data"] == "first"
    last = _tail(cluster, job_id, limit=12)  # no offset: the latest bytes
    assert (last["offset"], last["data"]) == (11, "second-line\n")


def test_tail_of_a_fast_writer_keeps_the_latest_bytes(cluster: Cluster) -> None:
    # About 2 MB at once: more than a push carries and more than the controller keeps.
    job_id = cluster.submit(command="seq 1 300000; echo tail-end; sleep 30")
    seen = _wait_tail(cluster, job_id, "tail-end")
    assert seen["running"] is True and seen["truncated"] is True
    assert seen["offset"] > 0 and seen["next_offset"] == seen["end"]
    assert seen["end"] - seen["offset"] <= 256 * 1024
    assert seen["data"].endswith("299999\n300000\ntail-end\n")
    from_zero = _tail(cluster, job_id, offset=0)
    assert from_zero["truncated"] is True and from_zero["offset"] > 0
    cluster.control(job_id, "kill")
    cluster.wait_state(job_id, "EXIT")
    whole = _tail(cluster, job_id, offset=0, limit=1024 * 1024)
    assert whole["running"] is False and whole["truncated"] is False
    assert whole["data"].startswith("1\n2\n3\n")


def test_tail_is_scoped_like_the_files(cluster: Cluster) -> None:
    theirs = cluster.submit(command="echo root-secret; sleep 30")
    _wait_tail(cluster, theirs, "root-secret")
    with pytest.raises(ApiFailure) as err:
        _tail(cluster, theirs, token=USER_TOKEN)
    assert err.value.status == 403
    assert "root-secret" not in str(err.value.body)
    with pytest.raises(ApiFailure) as err:
        cluster.get(f"/api/v1/jobs/{theirs}/files", token=USER_TOKEN)  # the same rule
    assert err.value.status == 403
    mine = cluster.post("/api/v1/jobs", {"command": "echo alice-line; sleep 30"}, token=USER_TOKEN)[
        "job_id"
    ]
    cluster.wait_state(mine, "RUN", "EXIT")
    seen: dict[str, Any] = {}

    def alice_sees() -> bool:
        seen.update(_tail(cluster, mine, token=USER_TOKEN))
        return "alice-line" in seen["data"] or seen["state"] == "EXIT"

    cluster.wait_for(alice_sees, 20, "alice's own tail")
    if seen["state"] != "EXIT":  # the job may run as alice only where she has an account
        assert seen["data"] == "alice-line\n"
    for job_id in (theirs, mine):
        with contextlib.suppress(ApiFailure):  # alice's may have ended already
            cluster.control(job_id, "kill")


def test_tail_refuses_bad_parameters(cluster: Cluster) -> None:
    job_id = cluster.submit(command="true")
    array = cluster.submit(command="true", array="1-2")
    cases = [
        ({"stream": "stdin"}, "stream"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "x"}, "offset"),
        ({"limit": "0"}, "limit"),
        ({"stram": "stdout"}, "stram"),
    ]
    for params, needle in cases:
        with pytest.raises(ApiFailure) as err:
            _tail(cluster, job_id, **params)
        assert err.value.status == 400, params
        assert needle in err.value.body["error"]["message"], err.value.body
    with pytest.raises(ApiFailure) as err:
        _tail(cluster, array)
    assert err.value.status == 400 and f"{array}[1]" in err.value.body["error"]["message"]
    with pytest.raises(ApiFailure) as err:
        _tail(cluster, "99999")
    assert err.value.status == 404


def _attempt_runs(cluster: Cluster, job_id: str, attempt: int) -> None:
    """A requeue ends the running attempt first: wait until the next one runs."""
    cluster.wait_for(
        lambda: (cluster.job(job_id)["attempt"], cluster.job(job_id)["state"]) == (attempt, "RUN"),
        30,
        f"attempt {attempt} of {job_id} running",
    )


def test_history_lists_what_happened_in_order(cluster: Cluster) -> None:
    done = cluster.submit(command="exit 3")
    job = cluster.wait_state(done, "EXIT")
    assert _events(job) == ["submitted", "started", "finished"]
    times = [h["at"] for h in job["history"]]
    assert times == sorted(times) and None not in times
    assert "on w" in job["history"][1]["detail"]
    assert "exit code 3" in job["history"][2]["detail"]

    job_id = cluster.submit(command="sleep 60")
    cluster.wait_state(job_id, "RUN")
    cluster.control(job_id, "stop")
    cluster.wait_state(job_id, "USUSP")
    cluster.control(job_id, "resume")
    cluster.wait_state(job_id, "RUN")
    cluster.control(job_id, "requeue")
    _attempt_runs(cluster, job_id, 1)
    cluster.control(job_id, "kill")
    job = cluster.wait_state(job_id, "EXIT")
    assert _events(job) == [
        "submitted",
        "started",
        "suspended",
        "resumed",
        "requeue_requested",
        "requeued",
        "started",
        "kill_requested",
        "finished",
    ], job["history"]
    assert "attempt 0" in job["history"][1]["detail"]
    assert "attempt 1" in job["history"][6]["detail"]
    times = [h["at"] for h in job["history"]]
    assert times == sorted(times)


def test_history_after_a_restart_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    cluster.start_worker("w1")
    try:
        job_id = cluster.submit(command="sleep 60")
        cluster.wait_state(job_id, "RUN")
        cluster.control(job_id, "requeue")
        _attempt_runs(cluster, job_id, 1)
        cluster.control(job_id, "stop")
        cluster.wait_state(job_id, "USUSP")
        before = cluster.job(job_id)["history"]
        assert [h["event"] for h in before] == [
            "submitted",
            "started",
            "requeue_requested",
            "requeued",
            "started",
            "suspended",
        ]
        assert cluster.controller is not None
        cluster.controller.terminate()
        cluster.controller.wait(20)
        cluster.start_controller()
        after = cluster.job(job_id)["history"]
        assert [h["event"] for h in after] == ["submitted", "requeued", "started", "suspended"]
        assert after[0] == before[0] and after[2] == before[4]  # exact times kept
        assert after[1]["at"] is None and after[3]["at"] is None
        assert "time unknown" in after[1]["detail"]
        cluster.control(job_id, "resume")  # recorded exactly again
        job = cluster.wait_state(job_id, "RUN")
        assert job["history"][-1]["event"] == "resumed" and job["history"][-1]["at"]
        cluster.control(job_id, "kill")
        cluster.wait_state(job_id, "EXIT")
    finally:
        cluster.stop()


def _xce(cluster: Cluster, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XCE_CONTROLLERS": cluster.url,
        "XCE_TOKEN": ADMIN_TOKEN,
        "XCE_CLIENT_CONFIG": str(cluster.root / "no-client.toml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        **kw,
    )


def test_peek_prints_and_follows_output(cluster: Cluster) -> None:
    job_id = cluster.submit(command=TWO_LINES)
    _wait_tail(cluster, job_id, "first-line")
    now = _xce(cluster, "job", "peek", job_id)
    assert now.returncode == 0, now.stderr
    assert now.stdout == "first-line\n"
    followed = _xce(cluster, "job", "peek", "-f", "--interval", "0.3", job_id)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "first-line\nsecond-line\n"
    assert cluster.job(job_id)["state"] == "DONE"
    err = _xce(cluster, "job", "peek", "--stderr", job_id)
    assert err.returncode == 0 and err.stdout == "err-one\n"
    missing = _xce(cluster, "job", "peek", "99999")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_peek_follow_stops_quietly_on_ctrl_c(cluster: Cluster) -> None:
    job_id = cluster.submit(command="echo still-going; sleep 60")
    _wait_tail(cluster, job_id, "still-going")
    env = {
        **os.environ,
        "XCE_CONTROLLERS": cluster.url,
        "XCE_TOKEN": ADMIN_TOKEN,
        "XCE_CLIENT_CONFIG": str(cluster.root / "no-client.toml"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "xce", "job", "peek", "-f", job_id],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out == "still-going\n"
    assert proc.returncode == 130 and "Traceback" not in err and "Aborted" not in err, err
    cluster.control(job_id, "kill")
