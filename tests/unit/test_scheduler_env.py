"""The pure parts behind migrated scripts' variables: Slurm host lists, the variable
families and submit-directory policy a queue resolves to, the variables themselves, and
the queue settings in the configuration file."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.config.loader import load_config
from xce.core import hostlist
from xce.core.errors import ConfigError
from xce.core.job_context import (
    job_families,
    missing_policy,
    parse_families,
    queue_for,
)
from xce.core.model import HostSlots, QueueRecord
from xce.protocol.worker import ArrayExtent, Assignment
from xce.worker.attempt.scheduler_env import scheduler_variables


@pytest.mark.parametrize(
    ("hosts", "text"),
    [
        (["n01"], "n01"),
        (["n01", "n02", "n03"], "n[01-03]"),
        (["n01", "n02", "n03", "n07", "gpu7", "login"], "n[01-03,07],gpu7,login"),
        (["n9", "n10", "n11"], "n[9-11]"),
        (["n09", "n10"], "n[09-10]"),
        (["a1", "b1", "a2"], "a[1-2],b1"),
        (["w1", "w2"], "w[1-2]"),
        (["host"], "host"),
    ],
)
def test_host_lists_compress_as_slurm_writes_them(hosts: list[str], text: str) -> None:
    assert hostlist.compress(hosts) == text
    assert sorted(hostlist.expand(text)) == sorted(hosts)


def test_expand_reads_ranges_and_lists() -> None:
    assert hostlist.expand("n[01-03,07],gpu7") == ["n01", "n02", "n03", "n07", "gpu7"]
    assert hostlist.expand("rack[1-2]-n1") == ["rack1-n1", "rack2-n1"]


def test_tasks_per_node_folds_runs() -> None:
    assert hostlist.tasks_per_node([2, 2, 2, 1]) == "2(x3),1"
    assert hostlist.tasks_per_node([4]) == "4"
    assert hostlist.tasks_per_node([1, 2, 1]) == "1,2,1"


def test_families_and_policy_come_from_the_queue_else_the_site() -> None:
    site = ("slurm", "lsf", "pbs")
    assert job_families(None, site) == site
    assert job_families(QueueRecord("q"), site) == site
    assert job_families(QueueRecord("q", job_env=""), site) == ()
    assert job_families(QueueRecord("q", job_env="pbs, slurm"), site) == ("pbs", "slurm")
    assert parse_families("none") == ()
    with pytest.raises(ValueError, match="unknown variable family 'sge'"):
        parse_families("slurm,sge")
    assert missing_policy(QueueRecord("q"), "fail") == "fail"
    assert missing_policy(QueueRecord("q", missing_submit_dir="job_dir"), "fail") == "job_dir"


def test_a_queue_is_found_by_name_then_alias() -> None:
    queues = {"normal": QueueRecord("normal"), "gpu": QueueRecord("gpu", aliases=("v100",))}
    assert queue_for("gpu", queues) is queues["gpu"]
    assert queue_for("v100", queues) is queues["gpu"]
    assert queue_for("nope", queues) is None


def _assignment(**fields: object) -> Assignment:
    base: dict = {
        "job_id": "12",
        "attempt": 1,
        "action": "run",
        "number": 12,
        "user": "alice",
        "name": "sim",
        "queue": "normal",
        "slots": 4,
        "submit_dir": "/home/alice/p",
        "submit_host": "login1",
        "job_env": ["slurm", "lsf", "pbs"],
    }
    return Assignment(**{**base, **fields})  # type: ignore[arg-type]


def test_an_array_task_gets_its_index_in_every_family() -> None:
    a = _assignment(
        job_id="12[4]", array_index=4, array=ArrayExtent(count=3, min=2, max=6), attempt=3
    )
    env = scheduler_variables(a, "alice", Path("/x"), [HostSlots("n1", 4)], Path("/j/nodes"))
    assert env["SLURM_ARRAY_TASK_ID"] == env["LSB_JOBINDEX"] == env["PBS_ARRAY_INDEX"] == "4"
    assert env["SLURM_ARRAY_JOB_ID"] == env["LSB_JOBID"] == "12"
    assert env["SLURM_JOB_ID"] == "12_4" and env["PBS_JOBID"] == "12[4]"
    assert (env["SLURM_ARRAY_TASK_COUNT"], env["SLURM_ARRAY_TASK_MIN"]) == ("3", "2")
    assert env["SLURM_ARRAY_TASK_MAX"] == env["LSB_JOBINDEX_END"] == "6"
    assert env["SLURM_RESTART_COUNT"] == "2"
    assert env["SLURM_SUBMIT_DIR"] == "/home/alice/p" and env["LSB_SUB_HOST"] == "login1"
    assert env["PBS_NODEFILE"] == env["LSB_DJOB_HOSTFILE"] == "/j/nodes"


def test_families_turned_off_set_nothing() -> None:
    env = scheduler_variables(
        _assignment(job_env=["pbs"]), "alice", Path("/x"), [HostSlots("n1", 4)], None
    )
    assert all(k.startswith("PBS_") for k in env) and "PBS_NODEFILE" not in env
    assert scheduler_variables(_assignment(job_env=[]), "a", Path("/x"), [], None) == {}


def test_without_a_submit_dir_the_working_directory_is_named() -> None:
    env = scheduler_variables(
        _assignment(submit_dir=None), "alice", Path("/spool/12"), [HostSlots("n1", 4)], None
    )
    assert env["SLURM_SUBMIT_DIR"] == env["PBS_O_WORKDIR"] == "/spool/12"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xce.toml"
    path.write_text(text)
    return path


def test_queue_settings_in_the_file(tmp_path: Path) -> None:
    config = load_config(
        _config(
            tmp_path,
            '[controller]\njob_env = ["lsf"]\nmissing_submit_dir = "job_dir"\n'
            '[[queue]]\nname = "normal"\naliases = ["batch"]\njob_env = []\n'
            'missing_submit_dir = "fail"\n',
        )
    )
    assert config.controller.job_env == ("lsf",)
    assert config.controller.missing_submit_dir == "job_dir"
    (queue,) = config.controller.queues
    assert (queue.aliases, queue.job_env, queue.missing_submit_dir) == (("batch",), "", "fail")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[queue]]\nname = "normal"\njob_env = ["sge"]\n', "unknown variable family 'sge'"),
        ('[[queue]]\nname = "normal"\nmissing_submit_dir = "home"\n', "missing_submit_dir"),
        ('[[queue]]\nname = "normal"\naliases = ["normal"]\n', "its own name"),
        (
            '[[queue]]\nname = "normal"\naliases = ["b"]\n[[queue]]\nname = "o"\naliases = ["b"]\n',
            "alias 'b' is claimed by queues 'normal' and 'o'",
        ),
        (
            '[[queue]]\nname = "normal"\naliases = ["o"]\n[[queue]]\nname = "o"\n',
            "alias 'o' is the name of a queue",
        ),
        ('[controller]\nmissing_submit_dir = "x"\n', "missing_submit_dir"),
        ('[controller]\njob_env = ["sge"]\n', "job_env"),
    ],
)
def test_bad_queue_settings_are_refused_naming_them(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[")):
        load_config(_config(tmp_path, text))


def test_a_job_with_slurm_variables_keeps_mpirun_off_srun() -> None:
    """OpenMPI picks its Slurm starter when SLURM_* are set and dies looking for `srun`:
    the job gets `^slurm` and this worker's `xce launch` as the remote agent, unless the
    submitter chose its own."""
    from xce.protocol.worker import LaunchInfo
    from xce.worker.attempt.jobenv import job_environment

    launch = LaunchInfo(credential="c", tasks={"n1": "127.0.0.1:1"}, cwd="", bin="/opt/xce/bin")
    env = job_environment(_assignment(launch=launch), None, Path("/x"), "n1")
    assert env["OMPI_MCA_plm"] == "^slurm"
    assert env["OMPI_MCA_plm_rsh_agent"] == "/opt/xce/bin/xce launch"
    mine = _assignment(launch=launch, env={"OMPI_MCA_plm": "rsh", "OMPI_MCA_plm_rsh_agent": "ssh"})
    env = job_environment(mine, None, Path("/x"), "n1")
    assert (env["OMPI_MCA_plm"], env["OMPI_MCA_plm_rsh_agent"]) == ("rsh", "ssh")
    env = job_environment(_assignment(launch=launch, job_env=["lsf"]), None, Path("/x"), "n1")
    assert "OMPI_MCA_plm" not in env and "LSB_JOBID" in env
