"""The familiar commands against a real cluster (a controller and two workers on loopback),
run as the installed symlinks: what they submit runs, what they list is in the real tools'
columns, what they cancel ends."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ISSUER, Cluster

ROOT = Path(__file__).resolve().parents[2]
# An admin named root: jobs run as root, which the test cluster allows.
TOKEN = ISSUER.issue("root", (), ("admin",))[0]


class Tools:
    """The installed commands, run from a working directory with the cluster's settings."""

    def __init__(self, cluster: Cluster, bin_dir: Path, work: Path) -> None:
        self.cluster = cluster
        self.bin_dir = bin_dir
        self.work = work
        self.env = {
            **os.environ,
            "XCE_CONTROLLERS": cluster.url,
            "XCE_TOKEN": TOKEN,
            "HOME": str(work),
            "PYTHONPATH": str(ROOT),
        }
        self.env.pop("XCE_CLIENT_CONFIG", None)

    def run(
        self, tool: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / tool), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.work,
            timeout=120,
        )

    def ok(self, tool: str, *args: str, stdin: str | None = None) -> str:
        result = self.run(tool, *args, stdin=stdin)
        assert result.returncode == 0, (tool, args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        return result.stdout


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    root = tmp_path_factory.mktemp("compat")
    cluster = Cluster(root / "cluster")
    cluster.start_controller()
    cluster.start_worker("w1", slots=4)
    cluster.start_worker("w2", slots=4)
    xce = root / "xbin" / "xce"
    xce.parent.mkdir()
    xce.write_text(f"#!{sys.executable}\nfrom xce.cli.main import run\nrun()\n")
    xce.chmod(0o755)
    work = root / "work"
    work.mkdir()
    t = Tools(cluster, root / "site" / "bin", work)
    made = subprocess.run(
        [str(xce), "compat", "install", "--prefix", str(root / "site")],
        capture_output=True,
        text=True,
        env=t.env,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    try:
        yield t
    finally:
        cluster.stop()


def _kill(tools: Tools, *ids: str) -> None:
    for job_id in ids:
        tools.cluster.control(job_id, "kill")
    for job_id in ids:
        tools.cluster.wait_state(job_id, "DONE", "EXIT", timeout=60)


SQUEUE_HEADER = (
    "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
)
BJOBS_HEADER = ["JOBID", "USER", "STAT", "QUEUE", "FROM_HOST", "EXEC_HOST", "JOB_NAME"]


def _column(header: str, line: str, title: str) -> str:
    """The cell of `line` under `title` of `header` (up to where the next title starts)."""
    start = header.index(title)
    rest = header[start + len(title) :]
    end = start + len(title) + (len(rest) - len(rest.lstrip())) if rest.strip() else len(line)
    return line[start:end].strip()


def test_submit_and_list_as_slurm_lsf_and_pbs_show_them(tools: Tools) -> None:
    script = tools.work / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J slurmjob\n#SBATCH -n 2\nsleep 300\n")
    out = tools.ok("sbatch", "-t", "30", str(script))
    slurm_id = re.fullmatch(r"Submitted batch job (\d+)\n", out).group(1)  # type: ignore[union-attr]
    lsf_out = tools.ok("bsub", "-J", "arr[1-2]", "-q", "fragile", "sleep", "300")
    array_id = re.fullmatch(  # type: ignore[union-attr]
        r"Job <(\d+)> is submitted to queue <fragile>\.\n", lsf_out
    ).group(1)
    pbs_script = "#!/bin/sh\n#PBS -N pbsjob\n#PBS -l walltime=00:10:00,ncpus=1\nsleep 300\n"
    pbs_id = tools.ok("qsub", stdin=pbs_script).strip()
    assert pbs_id.isdigit()
    held = tools.ok("sbatch", "--parsable", "-H", "-J", "held", "--wrap", "true").strip()
    for job_id in (slurm_id, f"{array_id}[1]", f"{array_id}[2]", pbs_id):
        tools.cluster.wait_state(job_id, "RUN", timeout=60)
    job = tools.cluster.job(slurm_id)
    assert (job["slots"], job["walltime_s"], job["name"]) == (2, 1800, "slurmjob")
    assert tools.cluster.job(pbs_id)["walltime_s"] == 600

    lines = tools.ok("squeue").splitlines()
    assert lines[0] == SQUEUE_HEADER
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[slurm_id][1:5] == ["normal", "slurmjob", "root", "R"]
    assert rows[slurm_id][6:] == ["1", "w1"] or rows[slurm_id][6:] == ["1", "w2"]
    assert rows[f"{array_id}_1"][1:5] == ["fragile", "arr", "root", "R"]
    assert rows[held][4:] == ["PD", "0:00", "1", "(JobHeldUser)"]
    assert all(len(line) >= len(SQUEUE_HEADER) - len("NODELIST(REASON)") for line in lines)

    mine = tools.ok("squeue", "-h", "-u", "root", "-t", "R", "-o", "%i|%T|%P|%D|%C").splitlines()
    assert f"{slurm_id}|RUNNING|normal|1|2" in mine and f"{array_id}_2|RUNNING|fragile|1|1" in mine
    assert all("PENDING" not in line for line in mine)
    assert tools.ok("squeue", "-h", "-j", f"{array_id}_2", "-o", "%i %K %F").split() == [
        f"{array_id}_2",
        "2",
        array_id,
    ]

    bjobs = tools.ok("bjobs").splitlines()
    assert bjobs[0].split() == [*BJOBS_HEADER, "SUBMIT_TIME"]
    by_name = {_column(bjobs[0], line, "JOB_NAME"): line for line in bjobs[1:]}
    assert set(by_name) >= {"slurmjob", "arr[1]", "arr[2]", "pbsjob", "held"}
    assert _column(bjobs[0], by_name["arr[2]"], "JOBID") == array_id
    assert _column(bjobs[0], by_name["arr[2]"], "QUEUE") == "fragile"
    assert _column(bjobs[0], by_name["slurmjob"], "STAT") == "RUN"
    assert _column(bjobs[0], by_name["slurmjob"], "EXEC_HOST") in ("2*w1", "2*w2")
    assert _column(bjobs[0], by_name["held"], "STAT") == "PSUSP"
    assert _column(bjobs[0], by_name["held"], "EXEC_HOST") == ""
    only = tools.ok("bjobs", "-noheader", "-q", "fragile").splitlines()
    assert len(only) == 2 and all(line.split()[0] == array_id for line in only)

    qstat = tools.ok("qstat").splitlines()
    assert qstat[0].split() == ["Job", "id", "Name", "User", "Time", "Use", "S", "Queue"]
    assert set(qstat[1]) == {"-", " "}
    states = {line.split()[0]: (line.split()[-2], line.split()[-1]) for line in qstat[2:]}
    assert states[pbs_id] == ("R", "normal")
    assert states[held] == ("H", "normal")
    assert states[f"{array_id}[1]"] == ("R", "fragile")

    _kill(tools, slurm_id, array_id, pbs_id, held)


def test_cluster_views(tools: Tools) -> None:
    job = tools.ok("sbatch", "--parsable", "-n", "4", "--wrap", "sleep 300").strip()
    tools.cluster.wait_state(job, "RUN", timeout=60)
    sinfo = tools.ok("sinfo").splitlines()
    assert sinfo[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    rows = [line.split() for line in sinfo[1:]]
    assert {r[0] for r in rows} == {"normal", "fragile"}
    normal = {r[4]: r for r in rows if r[0] == "normal"}
    assert set(normal) == {"alloc", "idle"}
    assert normal["alloc"][1:4] == ["up", "infinite", "1"]
    assert sorted([normal["alloc"][5], normal["idle"][5]]) == ["w1", "w2"]
    assert tools.ok("sinfo", "-h", "-s", "-p", "normal").split() == [
        "normal",
        "up",
        "infinite",
        "1/1/0/2",
        "w[1-2]",
    ]

    bhosts = tools.ok("bhosts").splitlines()
    assert bhosts[0].split() == [
        "HOST_NAME",
        "STATUS",
        "JL/U",
        "MAX",
        "NJOBS",
        "RUN",
        "SSUSP",
        "USUSP",
        "RSV",
    ]
    hosts = {line.split()[0]: line.split()[1:] for line in bhosts[1:]}
    busy = tools.cluster.job(job)["host"]
    idle = ({"w1", "w2"} - {busy}).pop()
    assert hosts[busy] == ["closed", "-", "4", "4", "4", "0", "0", "0"]
    assert hosts[idle] == ["ok", "-", "4", "0", "0", "0", "0", "0"]

    bqueues = tools.ok("bqueues", "normal").splitlines()
    assert bqueues[0].split()[:3] == ["QUEUE_NAME", "PRIO", "STATUS"]
    assert bqueues[1].split() == [
        "normal",
        "30",
        "Open:Active",
        "-",
        "-",
        "-",
        "-",
        "1",
        "0",
        "1",
        "0",
    ]

    node = tools.ok("scontrol", "show", "node", busy)
    assert f"NodeName={busy}" in node and "State=ALLOCATED" in node and "CPUAlloc=4" in node
    _kill(tools, job)


def test_cancel_then_account_for_it(tools: Tools) -> None:
    ids = [tools.ok("sbatch", "--parsable", "--wrap", "sleep 300").strip() for _ in range(2)]
    lsf_job = re.search(r"<(\d+)>", tools.ok("bsub", "sleep", "300")).group(1)  # type: ignore[union-attr]
    pbs_job = tools.ok("qsub", "--", "/bin/sleep", "300").strip()
    array = tools.ok("sbatch", "--parsable", "--array=1-3", "--wrap", "sleep 300").strip()
    for job_id in [*ids, lsf_job, pbs_job, f"{array}[1]"]:
        tools.cluster.wait_state(job_id, "RUN", timeout=60)

    assert tools.ok("scancel", ids[0], f"{array}_2") == ""
    killed = tools.ok("bkill", lsf_job)
    assert killed == f"Job <{lsf_job}> is being terminated\n"
    assert tools.ok("qdel", f"{pbs_job}.server") == ""
    for job_id in (ids[0], f"{array}[2]", lsf_job, pbs_job):
        assert tools.cluster.wait_state(job_id, "EXIT", timeout=60)["state"] == "EXIT"
    assert tools.cluster.job(ids[1])["state"] == "RUN"
    assert tools.cluster.job(f"{array}[1]")["state"] == "RUN"

    missing = tools.run("scancel", "999999")
    assert missing.returncode == 1
    assert missing.stderr.startswith("scancel: error: Kill job error on job id 999999: ")

    states = dict(
        line.split() for line in tools.ok("squeue", "-h", "-t", "all", "-o", "%i %t").splitlines()
    )
    assert states[ids[0]] == "CA" and states[ids[1]] == "R" and states[f"{array}_2"] == "CA"

    sacct = tools.ok("sacct", "-j", ids[0]).splitlines()
    assert sacct[0].split() == [
        "JobID",
        "JobName",
        "Partition",
        "Account",
        "AllocCPUS",
        "State",
        "ExitCode",
    ]
    assert set(sacct[1]) == {"-", " "}
    assert sacct[2].split()[0] == ids[0] and sacct[2].split()[-2] == "CANCELLED"
    parsable = tools.ok("sacct", "-X", "-n", "-P", "-o", "jobid,state,exitcode", "-j", ids[1])
    assert parsable == f"{ids[1]}|RUNNING|0:0\n"  # live jobs too, as sacct shows them

    # every remaining job of the user, as scripts clean up
    assert tools.ok("scancel", "-u", "root") == ""
    for job_id in (ids[1], f"{array}[1]", f"{array}[3]"):
        tools.cluster.wait_state(job_id, "EXIT", timeout=60)
    assert tools.ok("squeue", "-h") == ""
    assert tools.run("bjobs").stderr == "No unfinished job found\n"


def test_hold_release_and_wait(tools: Tools) -> None:
    later = tools.ok("sbatch", "--parsable", "--begin=now+1hour", "--wrap", "true").strip()
    tools.cluster.wait_for(lambda: tools.cluster.job(later)["reason"], 30, "a scheduling pass")
    assert tools.ok("squeue", "-h", "-j", later, "-o", "%t %r") == "PD BeginTime\n"
    assert tools.ok("scontrol", "hold", later) == ""
    assert tools.cluster.job(later)["state"] == "PSUSP"
    assert tools.ok("squeue", "-h", "-j", later, "-o", "%t %r") == "PD JobHeldUser\n"
    assert tools.ok("scontrol", "release", later) == ""
    assert tools.cluster.job(later)["state"] == "PEND"
    not_held = tools.run("scontrol", "release", later)
    assert not_held.returncode == 1 and "Job is not held" in not_held.stderr

    shown = tools.ok("scontrol", "show", "job", later)
    assert shown.startswith(f"JobId={later} JobName=true\n")
    assert "JobState=PENDING Reason=BeginTime" in shown
    _kill(tools, later)

    failed = tools.run("sbatch", "-W", "--wrap", "exit 3")
    assert failed.returncode == 3, failed.stderr
    assert re.fullmatch(r"Submitted batch job \d+\n", failed.stdout)
    waited = tools.run("bsub", "-K", "true")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.endswith("<<Waiting for dispatch ...>>\n<<Job is finished>>\n")


def test_errors_are_one_line(tools: Tools) -> None:
    for tool, args in (
        ("squeue", ["--bogus"]),
        ("bjobs", ["-frob"]),
        ("qstat", ["-Q"]),
        ("sbatch", ["--frob=1", "--wrap", "true"]),
        ("sacct", ["-o", "nosuchfield"]),
        ("scontrol", ["update", "JobId=1"]),
    ):
        result = tools.run(tool, *args)
        assert result.returncode == 2, (tool, result.stderr)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"{tool}: error: ")
        assert "Traceback" not in result.stderr
