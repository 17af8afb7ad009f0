"""The variables job scripts written for Slurm, LSF or PBS read, beside XCE's own.

Why: a site moves over with its scripts unchanged. An array script reading
`$SLURM_ARRAY_TASK_ID` or `$LSB_JOBINDEX` must get its task's index, or every task silently
does the same work; `$SLURM_SUBMIT_DIR`, `$LS_SUBCWD` and `$PBS_O_WORKDIR` name the submit
directory; the host lists are in each scheduler's own form (Slurm's compressed
`n[01-03]`, LSF's one name per slot). The controller says which families a job gets (its
queue's `job_env`, else the controller's); a family turned off sets nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xce.core import hostlist
from xce.core.model import HostSlots
from xce.protocol.worker import Assignment


def scheduler_variables(
    a: Assignment,
    user: str,
    work_dir: Path,
    hosts: Sequence[HostSlots],
    nodefile: Path | None,
) -> dict[str, str]:
    """The SLURM_*, LSB_*/LS_* and PBS_* variables of the families `a.job_env` names.

    `hosts` is the allocation, first host first (one entry for a single-host job);
    `nodefile` the file listing one host per slot (None: not written)."""
    submit_dir = a.submit_dir or str(work_dir)
    env: dict[str, str] = {}
    if "slurm" in a.job_env:
        env.update(_slurm(a, user, submit_dir, hosts))
    if "lsf" in a.job_env:
        env.update(_lsf(a, submit_dir, hosts, nodefile))
    if "pbs" in a.job_env:
        env.update(_pbs(a, submit_dir, nodefile))
    return env


def _slurm(a: Assignment, user: str, submit_dir: str, hosts: Sequence[HostSlots]) -> dict[str, str]:
    names = [p.host for p in hosts]
    slots = sum(p.slots for p in hosts)
    env = {
        "SLURM_JOB_ID": _job_id(a, "_"),
        "SLURM_JOBID": _job_id(a, "_"),
        "SLURM_JOB_NAME": a.name,
        "SLURM_JOB_USER": user,
        "SLURM_JOB_PARTITION": a.queue,
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_SUBMIT_HOST": a.submit_host,
        "SLURM_NTASKS": str(slots),
        "SLURM_NPROCS": str(slots),
        "SLURM_CPUS_ON_NODE": str(hosts[0].slots if hosts else a.slots),
        "SLURM_JOB_NODELIST": hostlist.compress(names),
        "SLURM_NODELIST": hostlist.compress(names),
        "SLURM_JOB_NUM_NODES": str(len(names)),
        "SLURM_NNODES": str(len(names)),
        "SLURM_TASKS_PER_NODE": hostlist.tasks_per_node([p.slots for p in hosts]),
        "SLURM_RESTART_COUNT": str(max(a.attempt - 1, 0)),
        "SLURM_CLUSTER_NAME": "xce",
    }
    if a.memory_mb:
        env["SLURM_MEM_PER_NODE"] = str(a.memory_mb)
    if a.array_index is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(a.number)
        env["SLURM_ARRAY_TASK_ID"] = str(a.array_index)
        if a.array is not None:
            env["SLURM_ARRAY_TASK_COUNT"] = str(a.array.count)
            env["SLURM_ARRAY_TASK_MIN"] = str(a.array.min)
            env["SLURM_ARRAY_TASK_MAX"] = str(a.array.max)
    return env


def _lsf(
    a: Assignment, submit_dir: str, hosts: Sequence[HostSlots], nodefile: Path | None
) -> dict[str, str]:
    env = {
        "LSB_JOBID": str(a.number) if a.array_index is not None else a.job_id,
        "LSB_JOBINDEX": str(a.array_index) if a.array_index is not None else "0",
        "LSB_JOBNAME": a.name,
        "LSB_QUEUE": a.queue,
        "LSB_HOSTS": " ".join(p.host for p in hosts for _ in range(p.slots)),
        "LSB_MCPU_HOSTS": " ".join(f"{p.host} {p.slots}" for p in hosts),
        "LSB_DJOB_NUMPROC": str(sum(p.slots for p in hosts)),
        "LS_SUBCWD": submit_dir,
        "LSB_SUB_HOST": a.submit_host,
    }
    if a.array is not None and a.array_index is not None:
        env["LSB_JOBINDEX_END"] = str(a.array.max)
    if nodefile is not None:
        env["LSB_DJOB_HOSTFILE"] = str(nodefile)
    return env


def _pbs(a: Assignment, submit_dir: str, nodefile: Path | None) -> dict[str, str]:
    env = {
        "PBS_JOBID": _job_id(a, "[", "]"),
        "PBS_JOBNAME": a.name,
        "PBS_QUEUE": a.queue,
        "PBS_O_WORKDIR": submit_dir,
        "PBS_O_HOST": a.submit_host,
        "PBS_ENVIRONMENT": "PBS_BATCH",
    }
    if a.array_index is not None:
        env["PBS_ARRAY_INDEX"] = str(a.array_index)
        env["PBS_ARRAYID"] = str(a.array_index)
    if nodefile is not None:
        env["PBS_NODEFILE"] = str(nodefile)
    return env


def _job_id(a: Assignment, open_: str, close: str = "") -> str:
    """A task's id in the scheduler's own form: Slurm `12_3`, PBS `12[3]`; a job's is its id."""
    if a.array_index is None:
        return a.job_id
    return f"{a.number}{open_}{a.array_index}{close}"
