"""Listing habits from Slurm and LSF against a real controller and worker, through the
`xce` command: `job list -u all`, `--format` (squeue `%` letters, XCE and bjobs field
names), `--noheader`, `--parsable`; `acct`/`report` `-P`/`-n`; `job output` of an array's own
number naming its tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN, Cluster


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4)
    try:
        yield c
    finally:
        c.stop()


def _cli(c: Cluster, *args: str, token: str = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": token, "HOME": str(c.root)}
    env.pop("XCE_CLIENT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _out(c: Cluster, *args: str, token: str = ADMIN_TOKEN) -> str:
    result = _cli(c, *args, token=token)
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def test_job_list_all_users_formats_noheader_and_parsable(one_worker: Cluster) -> None:
    c = one_worker
    mine = c.submit(command="true", user="alice", name="alice-job", hold=True)
    theirs = c.submit(command="true", user="bob", name="bob-job", hold=True)
    running = c.submit(command="sleep 120", name="sleeper")
    c.wait_state(running, "RUN")

    def pairs(*args: str, token: str = ADMIN_TOKEN) -> set[tuple[str, ...]]:
        text = _out(c, "job", "list", "--noheader", "-o", "%i %u", *args, token=token)
        return {tuple(line.split()) for line in text.splitlines()}

    everyone = {(mine, "alice"), (theirs, "bob"), (running, "root")}
    assert pairs("-u", "all") == everyone  # bjobs -u all: not a user named "all"
    assert pairs("--user", "all") == everyone
    assert pairs() == everyone
    assert pairs("-u", "alice") == {(mine, "alice")}
    assert pairs("-u", "all", token=USER_TOKEN) == {(mine, "alice")}  # only what alice may see

    squeue = _out(c, "job", "list", "-u", "alice", "-o", "%.18i %.9P %.8j %.8u %.2t %.10M")
    assert squeue.splitlines() == [
        "             JOBID PARTITION     NAME     USER ST       TIME",
        f"{mine:>18}    normal alice-jo    alice PD          -",
    ]
    placed = _out(c, "job", "list", "-u", "root", "--noheader", "-o", "%i %.5D %R %C %T")
    assert placed.split() == [running, "1", "w1", "1", "RUN"]
    named = _out(c, "job", "list", "-u", "bob", "-o", "jobid,USER,stat,name:-9,slots")
    assert named.splitlines() == [
        "JOBID USER STAT   JOB_NAME SLOTS",
        f"{theirs:<5} bob  PSUSP   bob-job 1",
    ]
    parsable = _out(c, "job", "list", "-u", "alice", "-o", "id,user,state,name:3", "--parsable")
    assert parsable == f"JOBID|USER|STAT|JOB_NAME\n{mine}|alice|PSUSP|alice-job\n"

    default = _out(c, "job", "list", "-u", "alice")
    assert default.splitlines()[0].split()[:3] == ["JOBID", "USER", "STAT"]
    assert _out(c, "job", "list", "-u", "alice", "--noheader") == default.split("\n", 1)[1]
    cells = _out(c, "job", "list", "-u", "alice", "--parsable", "--noheader").strip().split("|")
    assert cells[:4] == [mine, "alice", "PSUSP", "normal"] and len(cells) == 11

    for args, needle in (
        (("-o", "id,colour"), "unknown --format field 'colour'"),
        (("-o", "%.18i %Z"), "unknown --format field '%Z'"),
        (("--json", "--noheader"), "--json takes no"),
    ):
        bad = _cli(c, "job", "list", *args)
        assert bad.returncode == 2 and bad.stdout == "", (args, bad)
        assert bad.stderr.count("\n") == 1 and needle in bad.stderr, (args, bad.stderr)


def test_array_output_names_its_tasks_and_accounting_is_parsable(one_worker: Cluster) -> None:
    c = one_worker
    array = c.submit(command="echo hi", array="1-3", name="arr")
    c.wait_state(array, "DONE", "EXIT", timeout=60)
    tasks = [f"{array}[{i}]" for i in (1, 2, 3)]

    for extra in ((), ("-l",), ("-f", "stderr")):
        whole = _cli(c, "job", "output", array, *extra)
        assert whole.returncode == 1 and whole.stdout == "", whole
        assert whole.stderr == (
            f"xce: error: job {array} is an array: its tasks are {array}[1-3] "
            f"(ask for one, e.g. xce job output '{array}[1]')\n"
        )
    assert _out(c, "job", "output", tasks[0]) == "hi\n"
    unknown = _cli(c, "job", "output", "9999")
    assert unknown.returncode == 1 and "job 9999 does not exist" in unknown.stderr

    c.wait_for(
        lambda: len(c.get(f"/api/v1/accounting/jobs?job={array}")["jobs"]) == 3,
        30,
        "the tasks' accounting records",
    )
    args = ("acct", "-j", array, "-o", "jobid,state,alloccpus")
    parsable = _out(c, *args, "-P").splitlines()
    assert parsable[0] == "JobID|State|AllocCPUS"
    assert sorted(parsable[1:]) == [f"{t}|DONE|1" for t in tasks]
    assert sorted(_out(c, *args, "--parsable", "--noheader").splitlines()) == sorted(parsable[1:])
    aligned = _out(c, *args, "-n").splitlines()
    assert sorted(line.split() for line in aligned) == [[t, "DONE", "1"] for t in tasks]
    assert "JobID" not in _out(c, *args, "--noheader")
    both = _cli(c, *args, "--json", "-P")
    assert both.returncode == 2 and "--json takes no" in both.stderr

    report = _out(c, "report", "--by", "queue", "-P").splitlines()
    assert report[0].startswith("QUEUE|JOBS|ATTEMPTS|DONE|EXIT|")
    assert [line.split("|")[0] for line in report[1:]] == ["normal"]
    assert _out(c, "report", "--by", "queue", "-P", "-n").splitlines() == report[1:]
    titled = _out(c, "report", "--by", "queue").splitlines()
    assert titled[0].startswith("Usage by queue") and titled[1].startswith("QUEUE")
    assert _out(c, "report", "--by", "queue", "-n").splitlines()[0].startswith("normal")
