"""`--begin` and eligible time with real processes: a job pends with "begin time not
reached" until its begin time, then runs; `job show` and the accounting record carry the
eligible time and the wait counts from it (from a dependency's end too); bad begin times are
a 400 naming the problem and a one-line CLI error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure, Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4)
    try:
        yield c
    finally:
        c.stop()


def _cli(
    cluster: Cluster, *args: str, command: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(cluster.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", cluster.url, *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _record(cluster: Cluster, job_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def stored() -> bool:
        found[:] = cluster.get(
            "/api/v1/accounting/jobs?" + urllib.parse.urlencode({"job": job_id})
        )["jobs"]
        return bool(found)

    cluster.wait_for(stored, 30, f"the accounting record of {job_id}")
    return found[0]


def test_begin_time_holds_the_job_and_the_wait_counts_from_eligible(cluster: Cluster) -> None:
    begin = time.time() + 6
    job = cluster.submit(command="true", begin=begin)
    shown = cluster.job(job)
    assert shown["state"] == "PEND" and shown["begin_time"] == pytest.approx(begin)
    assert shown["eligible_time"] == pytest.approx(begin)
    cluster.wait_passes()
    assert cluster.job(job)["state"] == "PEND"
    assert cluster.job(job)["reason"].startswith("begin time not reached"), cluster.job(job)
    done = cluster.wait_state(job, "DONE", timeout=60)
    assert done["start_time"] >= begin
    record = _record(cluster, job)
    assert record["eligible_time"] == pytest.approx(begin)
    assert record["wait_s"] == pytest.approx(record["start_time"] - begin)

    # a dependency: eligible when its target ended, and the wait counts from there
    first = cluster.submit(command="sleep 2")
    after = cluster.submit(command="true", dependency=f"afterok:{first}")
    assert cluster.job(after)["eligible_time"] is None
    cluster.wait_state(after, "DONE", timeout=60)
    ended = _record(cluster, first)["end_time"]
    record = _record(cluster, after)
    assert record["eligible_time"] == pytest.approx(ended)
    assert record["wait_s"] == pytest.approx(record["start_time"] - ended)

    # the CLI: the eligible column, job show, a begin time through --begin
    table = _cli(cluster, "acct", "-j", after, "--format", "jobid,eligible,wait")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["JobID", "Eligible", "Wait"]
    assert time.strftime("%Y-%m-%dT%H:%M", time.gmtime(ended)) in table.stdout
    show = _cli(cluster, "job", "show", after, "--json")
    assert show.returncode == 0 and json.loads(show.stdout)["eligible_time"], show.stdout
    later = _cli(cluster, "job", "submit", "--begin", "now+1hour", "--json", command=("true",))
    assert later.returncode == 0, later.stderr
    later_id = json.loads(later.stdout)["job_id"]
    assert cluster.job(later_id)["begin_time"] == pytest.approx(time.time() + 3600, abs=120)


def test_bad_begin_times_are_refused_with_the_reason(cluster: Cluster) -> None:
    for bad in ("soon", "2026-13-40", 1e300, "now+99999w"):
        with pytest.raises(ApiFailure) as refused:
            cluster.submit(command="true", begin=bad)
        assert refused.value.status == 400
        assert "begin time" in refused.value.body["error"]["message"], refused.value.body
    with pytest.raises(ApiFailure) as wrong_type:
        cluster.submit(command="true", begin=[1])
    assert wrong_type.value.status == 400 and "begin" in wrong_type.value.body["error"]["message"]
    cli = _cli(cluster, "job", "submit", "--begin", "whenever", command=("true",))
    assert cli.returncode != 0
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and "begin time 'whenever' is not a time" in lines[0], cli.stderr
    assert cluster.get("/api/v1/jobs")["jobs"] == []


def test_killing_a_1000_task_array_leaves_one_record_per_task(cluster: Cluster) -> None:
    """Two tasks run (concurrency limit 2), 998 never start; `xce job kill ARRAY` ends all:
    1000 records, each task once, the never-started ones EXIT with no start time."""
    array = cluster.submit(command="sleep 60", array="1-1000%2")
    cluster.wait_for(
        lambda: cluster.job(array)["array"]["counts"]["RUN"] == 2, 60, "two tasks running"
    )
    killed = _cli(cluster, "job", "kill", array)
    assert killed.returncode == 0, killed.stderr
    rows: list[dict[str, Any]] = []

    def all_stored() -> bool:
        rows[:] = cluster.get(
            "/api/v1/accounting/jobs?" + urllib.parse.urlencode({"job": array, "limit": 5000})
        )["jobs"]
        return len(rows) >= 1000

    cluster.wait_for(all_stored, 60, "1000 records of the killed array")
    assert len(rows) == 1000
    assert len({(r["job_id"], r["attempt"]) for r in rows}) == 1000
    never = [r for r in rows if r["start_time"] is None]
    assert len(never) == 998
    assert all(r["state"] == "EXIT" and r["host"] is None and r["wall_s"] == 0 for r in never)
    ran = [r for r in rows if r["start_time"] is not None]
    assert len(ran) == 2 and all(r["state"] == "EXIT" for r in ran)
    summary = cluster.get("/api/v1/accounting/summary?by=user")["rows"]
    assert sum(r["attempts"] for r in summary) == 1000
