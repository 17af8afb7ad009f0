"""Accounting with real processes: a job's usage kept after retention purged it (checked
against /usr/bin/time -v of the same command), through the API and `xce acct`; RBAC across
two users; kill -9 of the controller while jobs finish leaves one record per attempt."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ADMIN_TOKEN, ISSUER, ApiFailure, Cluster
from tests.worker.linux_users import LinuxUsers, linux_users  # noqa: F401

# ~200 MiB held (bytearray(n) writes every page) and a few seconds of CPU.
BURN = (
    "python3 -c 'b = bytearray(200 << 20); s = sum(i * i for i in range(15_000_000)); "
    "print(len(b), s)'"
)


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4)
    try:
        yield c
    finally:
        c.stop()


def _time_v(err: str) -> tuple[float, int]:
    """CPU seconds (user + system) and max RSS in bytes from /usr/bin/time -v's report."""
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", err).group(1))  # type: ignore[union-attr]
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", err).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))  # type: ignore[union-attr]
    return user + system, rss * 1024


def _acct(cluster: Cluster, token: str, **query: str) -> list[dict[str, Any]]:
    path = "/api/v1/accounting/jobs?" + urllib.parse.urlencode(query)
    return cluster.get(path, token=token)["jobs"]


def _cli(cluster: Cluster, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": token, "HOME": str(cluster.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", cluster.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _restart(cluster: Cluster, sig: int = signal.SIGTERM) -> None:
    assert cluster.controller is not None
    cluster.controller.send_signal(sig)
    cluster.controller.wait(20)
    cluster.start_controller()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create users")
def test_usage_survives_retention_and_rbac_holds(
    one_worker: Cluster, linux_users: LinuxUsers
) -> None:
    cluster = one_worker
    alice, bob = linux_users.user(), linux_users.user()
    alice_token = ISSUER.issue(alice.name, (), ("user",))[0]
    bob_token = ISSUER.issue(bob.name, (), ("user",))[0]
    # The job is the command under /usr/bin/time -v: the reference measures the very run
    # the worker measures (two runs of it differ by more than 10 % on a shared machine).
    timed = f"/usr/bin/time -v sh -c {shlex.quote(BURN)}"
    burn = cluster.post("/api/v1/jobs", {"command": timed, "memory_mb": 1024}, token=alice_token)[
        "job_id"
    ]
    other = cluster.post("/api/v1/jobs", {"command": "true"}, token=bob_token)["job_id"]
    job = cluster.wait_state(burn, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", cluster.download(burn, "stderr")
    cluster.wait_state(other, "DONE", timeout=30)
    cpu_ref, rss_ref = _time_v(cluster.download(burn, "stderr").decode())

    # Restart with a one-second retention: a checkpoint purges both jobs from the state.
    cluster.extra_controller = "finished_retention_s = 1\ncheckpoint_interval_s = 1"
    _restart(cluster)
    cluster.wait_for(lambda: cluster.job(burn).get("archived") is True, 30, "job purged")
    assert cluster.get("/api/v1/jobs?limit=1000")["jobs"] == []

    [record] = _acct(cluster, ADMIN_TOKEN, job=burn)
    assert (record["user"], record["state"], record["exit_code"]) == (alice.name, "DONE", 0)
    assert record["host"] == "w1" and record["hosts"] == "w1:1" and record["req_memory_mb"] == 1024
    cpu = record["cpu_user_s"] + record["cpu_system_s"]
    assert abs(cpu - cpu_ref) <= 0.1 * cpu_ref, (cpu, cpu_ref)
    assert abs(record["max_rss_bytes"] - rss_ref) <= 0.1 * rss_ref, (record, rss_ref)
    assert record["mem_eff"] == pytest.approx(record["max_rss_bytes"] / (1024 << 20))
    assert record["cpu_eff"] == pytest.approx(cpu / record["wall_s"])
    assert record["wait_s"] >= 0 and record["end_time"] >= record["start_time"]

    shown = cluster.job(burn)
    assert shown["archived"] is True and shown["state"] == "DONE"
    assert shown["usage"]["max_rss_bytes"] == record["max_rss_bytes"]

    cli = _cli(cluster, ADMIN_TOKEN, "acct", "--json", "-j", burn)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["jobs"] == [record]
    table = _cli(
        cluster,
        ADMIN_TOKEN,
        "acct",
        "-u",
        alice.name,
        "-S",
        "1d",
        "--format",
        "jobid,user,state,maxrss",
    )
    assert table.returncode == 0 and re.search(
        rf"^{burn}\s+{alice.name}\s+DONE\s", table.stdout, re.M
    ), table.stdout
    eff = _cli(cluster, alice_token, "job", "eff", burn)
    assert eff.returncode == 0 and "Memory Efficiency:" in eff.stdout, eff.stderr
    show = _cli(cluster, alice_token, "job", "show", burn)
    assert show.returncode == 0 and "archived: True" in show.stdout, show.stdout

    # RBAC: each user sees only their own records; an admin sees both.
    assert {r["job_id"] for r in _acct(cluster, alice_token)} == {burn}
    assert {r["job_id"] for r in _acct(cluster, bob_token)} == {other}
    assert _acct(cluster, bob_token, user=alice.name) == []
    assert {r["job_id"] for r in _acct(cluster, ADMIN_TOKEN)} == {burn, other}
    with pytest.raises(ApiFailure) as denied:
        cluster.job(burn) if False else cluster.get(f"/api/v1/jobs/{burn}", token=bob_token)
    assert denied.value.status == 403
    rows = cluster.get("/api/v1/accounting/summary?by=user&since=1d", token=bob_token)["rows"]
    assert [(r["key"], r["jobs"]) for r in rows] == [(bob.name, 1)]
    everyone = cluster.get("/api/v1/accounting/summary?by=user", token=ADMIN_TOKEN)["rows"]
    assert {r["key"] for r in everyone} == {alice.name, bob.name}
    report = _cli(cluster, ADMIN_TOKEN, "report", "--by", "queue")
    assert report.returncode == 0 and re.search(r"^normal\s+2\s", report.stdout, re.M), (
        report.stdout
    )

    # Bad input: a 400 naming the problem, and a one-line CLI message.
    for query, word in (
        ("since=yesterday", "since"),
        ("state=RUN", "RUN"),
        ("by=planet", "by"),
        ("next=zzz", "next"),
    ):
        route = "summary" if query.startswith("by") else "jobs"
        with pytest.raises(ApiFailure) as bad:
            cluster.get(f"/api/v1/accounting/{route}?{query}")
        assert bad.value.status == 400 and word in bad.value.body["error"]["message"]
    wrong = _cli(cluster, ADMIN_TOKEN, "acct", "--format", "jobid,color")
    assert wrong.returncode != 0 and "unknown --format column 'color'" in wrong.stderr
    scraped = cluster.get("/metrics").decode()
    assert "xce_accounting_write_failures_total 0.0" in scraped
    assert "xce_accounting_backlog" in scraped


def test_kill_9_while_jobs_finish_leaves_one_record_per_attempt(one_worker: Cluster) -> None:
    cluster = one_worker
    ids = [cluster.submit(command=f"sleep 0.{i % 5}") for i in range(40)]
    cluster.wait_for(
        lambda: sum(cluster.job(j)["state"] == "DONE" for j in ids[:10]) >= 5,
        60,
        "the first jobs done",
    )
    _restart(cluster, signal.SIGKILL)  # while the others are finishing
    for job_id in ids:
        cluster.wait_state(job_id, "DONE", "EXIT", timeout=90)
    final = {j: cluster.job(j)["attempt"] for j in ids}

    def complete() -> bool:
        return len(_acct(cluster, ADMIN_TOKEN, limit="1000")) >= sum(a + 1 for a in final.values())

    cluster.wait_for(complete, 30, "every attempt recorded")
    records = _acct(cluster, ADMIN_TOKEN, limit="1000")
    keys = [(r["job_id"], r["attempt"]) for r in records]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted((j, a) for j, last in final.items() for a in range(last + 1))
