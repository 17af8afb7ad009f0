"""`xce job submit --batch FILE` and `--batch -` against a real controller and worker.

Each line is one job, read as `cd FILE's-dir && xce job submit LINE` would: the ids come back
one per line in line order; a bad line is named by its number and then nothing is submitted;
a line the controller refuses stops the batch there, and the ids printed are exactly the jobs
that exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, Cluster


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4)
    try:
        yield c
    finally:
        c.stop()


def _batch(
    c: Cluster, *args: str, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(c.root), "PWD": str(cwd)}
    env.pop("XCE_CLIENT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "xce", "job", "submit", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        input=stdin,
        timeout=120,
    )


def _total(c: Cluster) -> int:
    return int(c.get("/api/v1/jobs?limit=1")["total"])


def test_a_batch_file_submits_one_job_per_line_in_order(
    one_worker: Cluster, tmp_path: Path
) -> None:
    c = one_worker
    project = tmp_path / "project"
    project.mkdir()
    (project / "where.sh").write_text("#!/bin/sh\n#SBATCH -J from-script\npwd > where.txt\n")
    lines = ["# fifty jobs, held, then one script that runs", ""]
    lines += [f"-J held-{n} --hold -n {1 + n % 2} -- echo 'job {n}'" for n in range(49)]
    lines += ["  --user root where.sh   # a script beside the list, by a relative path"]
    (project / "jobs.txt").write_text("\n".join(lines) + "\n")

    result = _batch(c, "--batch", "jobs.txt", cwd=project)
    assert result.returncode == 0, result.stderr
    ids = result.stdout.split()
    assert len(ids) == 50 and len(set(ids)) == 50
    for n, job_id in enumerate(ids[:49]):
        job = c.job(job_id)
        assert (job["name"], job["state"], job["slots"]) == (f"held-{n}", "PSUSP", 1 + n % 2)
        assert job["command"] == f"echo 'job {n}'"
        assert job["submit_dir"] == str(project)
    ran = c.wait_state(ids[49], "DONE", "EXIT", timeout=60)
    assert (ran["name"], ran["state"]) == ("from-script", "DONE"), ran.get("reason")
    assert (project / "where.txt").read_text().strip() == str(project)


def test_a_bad_line_is_named_and_nothing_is_submitted(one_worker: Cluster, tmp_path: Path) -> None:
    c = one_worker
    lines = [f"-J ok-{n} --hold true" for n in range(50)]
    lines[22] = "-J broken --slots many true"
    lines[40] = "-J unquoted 'true"
    (tmp_path / "jobs.txt").write_text("\n".join(lines) + "\n")
    before = _total(c)

    result = _batch(c, "--batch", str(tmp_path / "jobs.txt"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    errors = result.stderr.splitlines()
    assert "jobs.txt:23: argument --slots/-n: invalid int value: 'many'" in errors[0]
    assert "jobs.txt:41: " in errors[1] and "quot" in errors[1]
    assert "2 bad line(s)" in errors[-1] and "nothing was submitted" in errors[-1]
    assert _total(c) == before


def test_stdin_batch_stops_at_the_line_the_controller_refuses(
    one_worker: Cluster, tmp_path: Path
) -> None:
    c = one_worker
    before = _total(c)
    text = "-J s1 --hold true\n-J s2 --hold true\n-J s3 --hold true\n"
    text += "-q no-such-queue true\n-J s5 --hold true\n-J s6 --hold true\n"

    result = _batch(c, "--batch", "-", cwd=tmp_path, stdin=text)
    assert result.returncode == 1
    ids = result.stdout.split()
    assert [c.job(job_id)["name"] for job_id in ids] == ["s1", "s2", "s3"]
    assert c.job(ids[0])["submit_dir"] == str(tmp_path)  # stdin: the current directory
    assert "stdin:4: " in result.stderr and "no-such-queue" in result.stderr
    assert "2 later line(s) not submitted" in result.stderr
    assert _total(c) == before + 3  # exactly the jobs printed


def test_batch_refuses_options_beside_it_and_on_its_lines(
    one_worker: Cluster, tmp_path: Path
) -> None:
    c = one_worker
    before = _total(c)
    beside = _batch(c, "--batch", "-", "-J", "x", cwd=tmp_path, stdin="true\n")
    assert beside.returncode == 2 and "--batch takes no command" in beside.stderr
    lines = "true\n--controller http://127.0.0.1:1 true\n--json true\n-J no-command\n"
    on_lines = _batch(c, "--batch", "-", cwd=tmp_path, stdin=lines)
    assert on_lines.returncode == 2
    assert "stdin:2: --controller is not allowed on a batch line" in on_lines.stderr
    assert "stdin:3: --json is not allowed on a batch line" in on_lines.stderr
    assert "stdin:4: nothing to run" in on_lines.stderr
    assert _total(c) == before
