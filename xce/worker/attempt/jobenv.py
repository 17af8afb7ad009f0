"""The environment a job starts with: login basics, the submitted variables, XCE's own."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from xce.core import allocation
from xce.core.model import HostSlots
from xce.protocol.worker import Assignment
from xce.worker.attempt.scheduler_env import scheduler_variables

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def job_environment(
    a: Assignment,
    account: pwd.struct_passwd | None,
    work_dir: Path,
    host: str,
    job_dir: Path | None = None,
) -> dict[str, str]:
    """A clean environment: login basics, the submitted variables, then what this host owns.

    The submitted environment (the submitter's, captured by `xce job submit --export`, and
    `--env`) may set PATH and anything else, but not the job user's identity on this host
    (HOME, USER, LOGNAME, SHELL: from the account) nor XCE's own variables (XCE_*: set last,
    so a submitted value never wins; the controller also refuses such names)."""
    if account is not None:
        home, name, shell = account.pw_dir, account.pw_name, account.pw_shell or "/bin/sh"
    else:
        home = os.environ.get("HOME", "/")
        name = pwd.getpwuid(os.geteuid()).pw_name
        shell = os.environ.get("SHELL", "/bin/sh")
    env = {
        "PATH": BASE_PATH,
        "HOME": home,
        "USER": name,
        "LOGNAME": name,
        "SHELL": shell,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    # A frozen (PyInstaller) worker rewrote LD_LIBRARY_PATH for itself: give jobs the original.
    if "LD_LIBRARY_PATH_ORIG" in os.environ:
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH_ORIG"]
    identity = {k: env[k] for k in ("HOME", "USER", "LOGNAME", "SHELL")}
    env.update(a.env)
    env.update(identity)
    env.update(
        XCE_JOB_ID=a.job_id,
        XCE_JOB_NAME=a.name,
        XCE_QUEUE=a.queue,
        XCE_SLOTS=str(a.slots),
        XCE_ATTEMPT=str(a.attempt),
        XCE_EXEC_HOST=host,
        XCE_JOB_DIR=str(work_dir),
    )
    if a.array_index is not None:
        env["XCE_ARRAY_ID"] = str(a.number)
        env["XCE_ARRAY_INDEX"] = str(a.array_index)
    launch = a.launch
    if launch is not None:  # what `xce launch` needs (xce/cli/launch.py)
        env["XCE_LAUNCH_CRED"] = launch.credential
        env["XCE_LAUNCH_TASKS"] = ",".join(
            f"{h}={addr}" for h, addr in launch.tasks.items() if addr
        )
        if launch.bin:  # this worker's own `xce` first, whatever the job's PATH
            env["XCE_LAUNCH"] = str(Path(launch.bin) / "xce")
            env["PATH"] = f"{launch.bin}:{env.get('PATH', BASE_PATH)}"
    shares = allocation_of(a)
    if shares:  # the whole allocation, like LSB_HOSTS / LSB_DJOB_HOSTFILE
        env.update(allocation.job_environment(shares))
        if job_dir is not None:
            env["XCE_HOSTFILE"] = str(job_dir / ".xce" / "hostfile")
    if a.job_env:  # SLURM_*, LSB_*, PBS_*: this job's, over any the submitter's shell had
        hosts = shares or [HostSlots(host, a.slots)]
        nodefile = None if job_dir is None else job_dir / ".xce" / "nodefile"
        env.update(scheduler_variables(a, name, work_dir, hosts, nodefile))
    if launch is not None:
        env.update(_mpi_defaults(a.env, env.get("XCE_LAUNCH"), "slurm" in a.job_env))
    return env


def _mpi_defaults(asked: dict[str, str], xce: str | None, slurm_vars: bool) -> dict[str, str]:
    """OpenMPI's settings that make a plain `mpirun` start its ranks through `xce launch`.

    Why: with SLURM_* variables set, OpenMPI picks its Slurm starter and dies looking for
    `srun`; `^slurm` keeps that one out (its allocation reader still reads SLURM_NODELIST, so
    `mpirun ./a.out` finds the job's hosts). The remote agent defaults to this worker's own
    `xce launch`. A value the submitter set, or an `--mca` option, wins."""
    out: dict[str, str] = {}
    if slurm_vars and "OMPI_MCA_plm" not in asked:
        out["OMPI_MCA_plm"] = "^slurm"
    if xce and " " not in xce and "OMPI_MCA_plm_rsh_agent" not in asked:
        out["OMPI_MCA_plm_rsh_agent"] = f"{xce} launch"
    return out


def allocation_of(a: Assignment) -> list[HostSlots]:
    """The assignment's hosts and slots (none from a controller that does not send them)."""
    return [HostSlots(h, n) for h, n in a.hosts]
