"""Jobs start where they were submitted from, with the variables migrated scripts read.

Real controller and workers on loopback, jobs of a real unprivileged Linux user in a
directory of their home: the working directory, the -o file, SLURM_*/LSB_*/PBS_* of a job,
an array's tasks and a job across two hosts; a submit directory the job's user cannot
enter (missing, or root's) ends the job naming it, or starts it in its own directory with a
warning where the queue says so; a queue can turn the families off.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create users")

QUEUES = """
[[queue]]
name = "fallback"
missing_submit_dir = "job_dir"

[[queue]]
name = "plain"
aliases = ["debug", "lowprio"]
job_env = []
"""

ENV_DUMP = "env | grep -E '^(SLURM_|LSB_|LS_|PBS_|XCE_)' | sort > env.$XCE_JOB_ID.txt\n"


@pytest.fixture
def two(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", queues=QUEUES)
    c.start_controller()
    c.start_worker("node01", slots=2)
    c.start_worker("node02", slots=2)
    try:
        yield c
    finally:
        c.stop()


def _submit_dir(user: LinuxUser) -> Path:
    """A directory of the user's own, 0700, as a home directory's subfolder is."""
    path = Path(user.home) / "project"
    subprocess.run(["install", "-d", "-m", "0700", "-o", user.name, str(path)], check=True)
    return path


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _done(cluster: Cluster, job_id: str) -> dict:
    job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", (job, cluster.download(job_id, "stderr"))
    return job


def test_a_job_starts_in_its_submit_directory_with_the_variables(
    two: Cluster, linux_users: LinuxUsers
) -> None:
    user = linux_users.user()
    here = _submit_dir(user)
    job_id = two.submit(
        user=user.name,
        name="sim",
        script="#!/bin/sh\npwd > where.txt\n" + ENV_DUMP + "echo hello\n",
        submit_dir=str(here),
        stdout="sim.%J.out",
        memory_mb=100,
    )
    job = _done(two, job_id)
    assert (here / "where.txt").read_text().strip() == str(here)
    assert (here / f"sim.{job_id}.out").read_text() == "hello\n"  # -o relative: the submit dir
    assert (here / "where.txt").stat().st_uid == user.uid  # written by the job's user
    env = _env(here / f"env.{job_id}.txt")
    host = job["host"]
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == env["LSB_JOBID"] == job_id
    assert env["PBS_JOBID"] == job_id
    for name in ("SLURM_SUBMIT_DIR", "LS_SUBCWD", "PBS_O_WORKDIR"):
        assert env[name] == str(here)
    assert env["SLURM_JOB_NAME"] == env["LSB_JOBNAME"] == "sim"
    assert env["SLURM_JOB_PARTITION"] == env["LSB_QUEUE"] == "normal"
    assert env["SLURM_JOB_USER"] == user.name
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == env["LSB_DJOB_NUMPROC"] == "1"
    assert env["SLURM_JOB_NODELIST"] == env["LSB_HOSTS"] == host
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "1"
    assert env["SLURM_MEM_PER_NODE"] == "100"
    assert env["SLURM_RESTART_COUNT"] == "0"
    assert env["LSB_MCPU_HOSTS"] == f"{host} 1"
    assert "SLURM_ARRAY_TASK_ID" not in env and env["LSB_JOBINDEX"] == "0"
    assert env["XCE_JOB_ID"] == job_id  # XCE's own are still there


def test_array_tasks_each_get_their_own_index(two: Cluster, linux_users: LinuxUsers) -> None:
    user = linux_users.user()
    here = _submit_dir(user)
    line = (
        "echo $SLURM_ARRAY_TASK_ID $LSB_JOBINDEX $PBS_ARRAY_INDEX $SLURM_ARRAY_JOB_ID "
        "$SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX $SLURM_JOB_ID "
        "> task.$SLURM_ARRAY_TASK_ID"
    )
    array_id = two.submit(user=user.name, command=line, submit_dir=str(here), array="2-6:2")
    for index in (2, 4, 6):
        _done(two, f"{array_id}[{index}]")
    for index in (2, 4, 6):
        fields = (here / f"task.{index}").read_text().split()
        assert fields == [str(index)] * 3 + [array_id, "3", "2", "6", f"{array_id}_{index}"]


def test_a_job_across_two_hosts_sees_them_in_each_schedulers_form(
    two: Cluster, linux_users: LinuxUsers
) -> None:
    user = linux_users.user()
    here = _submit_dir(user)
    script = "#!/bin/sh\n" + ENV_DUMP + "cat $LSB_DJOB_HOSTFILE > nodes.txt\n"
    job_id = two.submit(
        user=user.name, script=script, submit_dir=str(here), slots=4, resources="span[ptile=2]"
    )
    _done(two, job_id)
    env = _env(here / f"env.{job_id}.txt")
    assert env["SLURM_JOB_NODELIST"] == "node[01-02]"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_NTASKS"] == "4" and env["SLURM_CPUS_ON_NODE"] == "2"
    assert env["SLURM_JOB_NUM_NODES"] == "2"
    first, second = env["LSB_MCPU_HOSTS"].split()[::2]
    assert {first, second} == {"node01", "node02"}
    assert env["LSB_MCPU_HOSTS"] == f"{first} 2 {second} 2"
    assert env["LSB_HOSTS"] == f"{first} {first} {second} {second}"
    assert env["PBS_NODEFILE"] == env["LSB_DJOB_HOSTFILE"]
    assert (here / "nodes.txt").read_text() == f"{first}\n{first}\n{second}\n{second}\n"


def test_a_submit_directory_the_user_cannot_enter_ends_the_job_naming_it(
    two: Cluster, linux_users: LinuxUsers, tmp_path: Path
) -> None:
    user = linux_users.user()
    missing = two.submit(user=user.name, command="touch ran", submit_dir="/nonexistent/proj")
    job = two.wait_state(missing, "EXIT", "DONE", timeout=60)
    assert job["state"] == "EXIT" and "/nonexistent/proj" in job["reason"], job
    # Root's own directory: the worker (root) could enter it, the job's user cannot; the
    # job must not run there (the check is made as the user).
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    refused = two.submit(user=user.name, command="touch ran", submit_dir=str(secret))
    job = two.wait_state(refused, "EXIT", "DONE", timeout=60)
    assert job["state"] == "EXIT" and str(secret) in job["reason"], job
    assert not (secret / "ran").exists()


def test_a_queue_may_start_such_a_job_in_its_own_directory_with_a_warning(
    two: Cluster, linux_users: LinuxUsers
) -> None:
    user = linux_users.user()
    job_id = two.submit(
        user=user.name, queue="fallback", command="pwd", submit_dir="/nonexistent/proj"
    )
    _done(two, job_id)
    stderr = two.download(job_id, "stderr").decode()
    assert "warning: the submit directory /nonexistent/proj" in stderr
    where = two.download(job_id, "stdout").decode().strip()
    assert where.startswith(str(two.jobs_root))


def test_a_queue_can_turn_the_families_off_and_answer_to_its_aliases(
    two: Cluster, linux_users: LinuxUsers
) -> None:
    user = linux_users.user()
    here = _submit_dir(user)
    answer = two.post(
        "/api/v1/jobs",
        {"user": user.name, "queue": "debug", "command": ENV_DUMP, "submit_dir": str(here)},
    )
    assert answer["queue"] == "plain" and "warnings" not in answer
    _done(two, answer["job_id"])
    env = _env(here / f"env.{answer['job_id']}.txt")
    assert env["XCE_QUEUE"] == "plain"
    assert not [k for k in env if k.startswith(("SLURM_", "LSB_", "LS_", "PBS_"))]
    by_qos = two.post("/api/v1/jobs", {"user": user.name, "command": "true", "qos": "lowprio"})
    assert by_qos["queue"] == "plain"
    unmapped = two.post("/api/v1/jobs", {"user": user.name, "command": "true", "qos": "gold"})
    assert unmapped["queue"] == "normal"
    assert unmapped["warnings"] == ["qos 'gold' is not mapped to a queue here: ignored"]


def _cli_submit(cluster: Cluster, user: LinuxUser, cwd: Path, *args: str, stdin: str = "") -> str:
    """`xce job submit` run from `cwd` for `user` (an admin's token submits for them: the
    system's users cannot reach this interpreter), as their script would be."""
    from tests.integration.cluster import ADMIN_TOKEN

    env = {**os.environ, "XCE_CONTROLLERS": cluster.url, "XCE_TOKEN": ADMIN_TOKEN, "PWD": str(cwd)}
    done = subprocess.run(
        [sys.executable, "-m", "xce", "job", "submit", "--user", user.name, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"Job <(\d+)>", done.stdout)
    assert match, done.stdout
    return match.group(1)


SBATCH = """#!/bin/bash
#SBATCH --job-name=mpi-test      # a trailing comment
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --mem=100M
#SBATCH --output=slurm-%j.out
#SBATCH --account=physics
srun_hosts=$(echo $SLURM_JOB_NODELIST)
echo "$SLURM_JOB_NAME $SLURM_NTASKS $SLURM_JOB_NUM_NODES $srun_hosts $SLURM_TASKS_PER_NODE"
"""

BSUB_NO_SHEBANG = """#BSUB -J lsfarray[1-3]
#BSUB -n 1
#BSUB -R "rusage[mem=64MB]"
#BSUB -o out.%I
echo "$LSB_JOBINDEX $LS_SUBCWD $PWD" > idx.$LSB_JOBINDEX
"""


def test_migrated_scripts_run_from_their_directory(two: Cluster, linux_users: LinuxUsers) -> None:
    user = linux_users.user()
    here = _submit_dir(user)
    (here / "job.sh").write_text(SBATCH)
    job_id = _cli_submit(two, user, here, "job.sh")
    job = _done(two, job_id)
    assert job["name"] == "mpi-test" and job["slots"] == 4
    assert sorted(h["host"] for h in job["hosts"]) == ["node01", "node02"]  # --nodes=2
    out = (here / f"slurm-{job_id}.out").read_text().split()
    assert out == ["mpi-test", "4", "2", "node[01-02]", "2(x2)"]
    # An LSF file without #! (as `bsub < file` takes it): read for its directives.
    (here / "array.lsf").write_text(BSUB_NO_SHEBANG)
    array_id = _cli_submit(two, user, here, "array.lsf")
    for index in (1, 2, 3):
        _done(two, f"{array_id}[{index}]")
        assert (here / f"idx.{index}").read_text().split() == [str(index), str(here), str(here)]
        assert (here / f"out.{index}").exists()
    # On stdin, from a subdirectory: the job starts there.
    sub = here / "run2"
    subprocess.run(["install", "-d", "-o", user.name, str(sub)], check=True)
    piped = _cli_submit(two, user, sub, stdin="#!/bin/sh\n#SBATCH -J piped\npwd > where\n")
    _done(two, piped)
    assert (sub / "where").read_text().strip() == str(sub)
