"""One job attempt on this host: its directories, its cgroup, its keeper, its end.

Who does what (the worker is root, the job is hostile code):

* the worker's own bookkeeping for an attempt (`spec.json`, `keeper.json`, `result.json`,
  `report.json`) lives in `<spool>/state/<attempt>/`, 0700 root: a job cannot write it and
  the worker trusts nothing else about the attempt (never a pid file in the job's tree);
* the job's working directory `<jobs_dir>/<attempt>/` is the user's (0700); everything done
  inside it, and in the job's `cwd`, is done as the user (xce/worker/attempt/userfs.py);
* the process runs under a keeper (xce/worker/keeper/process.py) inside a cgroup of its own
  (xce/worker/cgroups): suspend freezes the cgroup, kill and requeue empty it, so nothing
  escapes by `setsid` or a double fork; usage comes from the cgroup.

The walltime limit counts running time only (suspended time is excluded, as in Slurm).

This module launches an attempt and waits for its end; the rest lives beside it:
running.py (RunningJob), accounts.py, jobenv.py, spool.py (directories), jobcontrol.py
(suspend, kill), readers.py (output descriptors), recovery.py (restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pwd
import time
from pathlib import Path
from typing import Any

import msgspec
import psutil

from xce.core import allocation
from xce.core.model import HostSlots
from xce.protocol.worker import Assignment
from xce.worker.attempt import fscreds, userfs
from xce.worker.attempt.jobcontrol import (
    _drop_cgroup,
    _start_kill,
    kill_group_now,
)
from xce.worker.attempt.jobenv import allocation_of, job_environment
from xce.worker.attempt.readers import close_readers
from xce.worker.attempt.running import JobResult, LaunchError, RunningJob, attempt_name
from xce.worker.cgroups import CgroupBackend, Limits
from xce.worker.cgroups.base import CgroupError
from xce.worker.cgroups.devices import deny_entries
from xce.worker.devices import gpu_usage as gpuusage
from xce.worker.devices import gpus
from xce.worker.keeper import fence, isolation
from xce.worker.keeper.client import KeeperError, KeeperLauncher, pidfd
from xce.worker.keeper.process import RESULT, SPEC, process_start, read_json, write_json

log = logging.getLogger("xce.worker.executor")

__all__ = ["LaunchContext", "finish", "launch", "limits_for", "wait"]


# --- launching ------------------------------------------------------------------------------


def limits_for(a: Assignment, pids_limit: int, host_memory_mb: int | None = None) -> Limits:
    """The cgroup limits of an attempt: `--mem` (else the host's memory as the worker
    declares it, default all of it: no job takes the worker's own), its slots as CPUs, the
    worker's task limit."""
    if host_memory_mb is None:
        host_memory_mb = psutil.virtual_memory().total // 2**20
    memory = a.memory_mb or host_memory_mb
    return Limits(
        memory_bytes=memory * 1024 * 1024 if memory else None,
        cpus=a.slots or 1,
        pids=pids_limit or None,
    )


@dataclasses.dataclass(frozen=True)
class LaunchContext:
    """What launching one attempt takes from its worker (`launch`'s second argument)."""

    launcher: KeeperLauncher
    """Starts the keeper that runs the job (xce/worker/keeper/client.py)."""
    backend: CgroupBackend
    """Makes the attempt's cgroup (xce/worker/cgroups)."""
    account: pwd.struct_passwd | None
    """The job's user, as xce/worker/attempt/accounts.py allowed it (None: not looked up)."""
    host: str
    """This worker's host name (the job's XCE_ variables name it)."""
    pids_limit: int
    """The worker's task limit for each job's cgroup (0: none)."""
    worker_state: Path
    """The spool's state directory (root's, 0700): the keeper records the attempt there."""
    contact: fence.Contact
    """The last controller contact and the fence timeout the keeper enforces from it."""
    private_tmp: bool
    """Whether jobs get a private /tmp (where their directories are not under /tmp). No
    default: a caller that forgot it would share the host's /tmp with the job."""
    devices: gpus.HostDevices
    """This host's devices: the job sees only the GPUs assigned to it. No default: a caller
    that forgot it would give the job no device rules, so every GPU."""
    host_memory_mb: int | None = None
    """The host's memory as the worker declares it: the limit of jobs without `--mem`
    (None: all of the machine's memory)."""


async def launch(job: RunningJob, ctx: LaunchContext) -> None:
    """Make the job's files (as the user), its cgroup, and have a keeper start it."""
    a = job.assignment
    launcher, backend, account, devices = ctx.launcher, ctx.backend, ctx.account, ctx.devices
    assert job.attempt_dir is not None
    shares = allocation_of(a)
    files = await fscreds.as_user(
        job.creds,
        userfs.prepare_job_files,
        str(job.job_dir),
        a.script,
        allocation.hostfile_text(shares) if shares else None,
        allocation.nodefile_text(shares or [HostSlots(ctx.host, a.slots)]) if a.job_env else None,
    )
    job.readers = {"stdout": files.stdout_reader, "stderr": files.stderr_reader}
    try:
        await _settle_work_dir(job, files.stderr, ctx.host)
        argv = _argv(a, files)
        name = attempt_name(a.job_id, a.attempt)
        limits = limits_for(a, ctx.pids_limit, ctx.host_memory_mb)
        limits = _fence_devices(a, backend, devices, limits)
        env = job_environment(a, account, job.work_dir, ctx.host, job.job_dir)
        env.update(gpus.job_env(a.devices, devices))  # after the submitted ones: XCE owns them
        write_json(
            str(job.attempt_dir),
            SPEC,
            _spec(job, argv, env, name, limits, ctx),
        )
        try:
            job.cgroup = await asyncio.to_thread(backend.create, name, limits)
        except CgroupError as exc:  # a launch failure: the job ends saying why
            raise LaunchError(str(exc)) from None
        try:
            started = await launcher.launch(str(job.attempt_dir), files.stdout, files.stderr)
        except (KeeperError, OSError, TimeoutError, ValueError) as exc:
            await asyncio.to_thread(_drop_cgroup, job.cgroup)
            raise LaunchError(str(exc)) from None
    except BaseException:
        close_readers(job)
        raise
    finally:
        for fd in (files.stdout, files.stderr):
            with contextlib.suppress(OSError):
                os.close(fd)
    job.keeper, job.leader = started.keeper, started.leader
    job.keeper_start = started.keeper_start
    job.cgroup.set_leader(started.leader)  # "none" follows the leader's session
    job.started = time.monotonic()


async def _settle_work_dir(job: RunningJob, stderr: int, host: str) -> None:
    """A job that starts in its submit directory needs that directory here, entered as its
    user. Where it is missing: end the job naming it, or (`missing_submit_dir = "job_dir"`)
    start in the job's own directory with a warning at the top of its stderr. Never silently."""
    a = job.assignment
    if a.cwd or not a.submit_dir or job.work_dir == job.job_dir:
        return
    problem = await fscreds.as_user(job.creds, userfs.enter_problem, str(job.work_dir))
    if problem is None:
        return
    if a.missing_submit_dir != "job_dir":
        raise LaunchError(
            f"the submit directory {job.work_dir} cannot be entered on host {host}: {problem} "
            "(submit with --cwd DIR, or from a directory this host shares)"
        )
    warning = (
        f"xce: warning: the submit directory {job.work_dir} cannot be entered on host "
        f"{host} ({problem}): the job starts in {job.job_dir}\n"
    )
    with contextlib.suppress(OSError):
        os.write(stderr, warning.encode())
    job.work_dir = job.job_dir


def _fence_devices(
    a: Assignment, backend: CgroupBackend, devices: gpus.HostDevices, limits: Limits
) -> Limits:
    """`limits` with the GPUs not assigned to the job denied, through the v1 devices
    hierarchy or a v2 device program (only then: "none" cannot fence)."""
    if backend.kind in ("v1", "v2") and devices.gpus:
        try:
            deny = deny_entries(gpus.denied_nodes(a.devices, devices))
        except CgroupError as exc:
            raise LaunchError(str(exc)) from None
        limits = dataclasses.replace(limits, devices_deny=deny)
    return limits


def _argv(a: Assignment, files: userfs.JobFiles) -> list[str]:
    """What the keeper executes: the script (through /bin/sh unless it has a #! line), or
    the command through `/bin/sh -c`."""
    if files.script is not None:
        shebang = (a.script or "").startswith("#!")
        argv = [files.script] if shebang else ["/bin/sh", files.script]
    elif a.command is None:
        raise LaunchError("the assignment has neither a command nor a script")
    else:
        argv = ["/bin/sh", "-c", a.command]
    return argv


def _spec(
    job: RunningJob,
    argv: list[str],
    env: dict[str, str],
    name: str,
    limits: Limits,
    ctx: LaunchContext,
) -> dict[str, Any]:
    """The attempt's spec.json: all the keeper needs to start the job, and all a restarted
    worker needs to find the attempt again (xce/worker/attempt/recovery.py)."""
    a, account, contact = job.assignment, ctx.account, ctx.contact
    return {
        "job_id": a.job_id,
        "attempt": a.attempt,
        # the plain JSON the controller sent (what a restarted worker reads back)
        "assignment": msgspec.to_builtins(a),
        "argv": argv,
        "env": env,
        "cwd": str(job.work_dir),
        "job_dir": str(job.job_dir),
        "user": account.pw_name if account else None,
        "uid": job.creds.uid if job.creds else None,
        "gid": job.creds.gid if job.creds else None,
        "groups": list(job.creds.groups) if job.creds else None,
        "cgroup": name,
        "worker_state": str(ctx.worker_state),
        "limits": dataclasses.asdict(limits),
        "contact": {"at": contact.at, "fence_timeout_s": contact.fence_timeout_s},
        # The rule every process of the job is given its /tmp by (the job's tasks on other
        # hosts too): xce/worker/keeper/isolation.py.
        "private_tmp": isolation.private_tmp_for(
            ctx.private_tmp, str(job.work_dir), str(job.job_dir)
        ),
    }


# --- waiting --------------------------------------------------------------------------------


async def wait(job: RunningJob, usage_interval: float, grace: float) -> JobResult:
    """Wait for the keeper to end the attempt, sampling usage and enforcing the walltime."""
    assert job.keeper is not None and job.attempt_dir is not None
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    fd = pidfd(job.keeper)

    def on_exit() -> None:
        if not ended.done():
            ended.set_result(None)

    if (
        fd is not None
        and job.keeper_start is not None
        and process_start(job.keeper) != job.keeper_start
    ):
        # The keeper ended before its descriptor was taken and the pid is another
        # process's now (or the process is gone): its result says how the job ended.
        os.close(fd)
        fd = None
        on_exit()
    if fd is not None:
        loop.add_reader(fd, on_exit)
    delays = [0.02, 0.1, 0.3, 0.6]  # densely at first, so short jobs still get figures
    try:
        while not ended.done():
            if fd is None and not _alive(job.keeper, job.keeper_start):
                on_exit()  # no pidfd (out of descriptors): watched by polling instead
                break
            job.meter.sample(job.cgroup)
            if job.assignment.devices:  # its GPUs' utilisation and memory (NVML)
                job.meter.gpus.sample(gpuusage.READER, job.assignment.devices)
            walltime = job.assignment.walltime_s  # read each time: `job modify`
            if walltime and not job.killing and job.running_seconds() > walltime:
                log.info("job %s exceeded its walltime of %ss", job.key[0], walltime)
                _start_kill(job, "walltime limit exceeded", grace)
            with contextlib.suppress(TimeoutError):
                delay = delays.pop(0) if delays else usage_interval
                if fd is None:
                    delay = min(delay, 0.5)
                await asyncio.wait_for(asyncio.shield(ended), min(delay, usage_interval))
    finally:
        if fd is not None:
            loop.remove_reader(fd)
            os.close(fd)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(job.keeper, os.WNOHANG)
    result = await _result_of(job)
    if result is None:  # the keeper died: end what it left, off the event loop
        await asyncio.to_thread(kill_group_now, job)
    return finish(job, result)


async def _result_of(job: RunningJob) -> dict[str, Any] | None:
    """The keeper's result.json; None only when it is truly absent. A read that fails for
    another reason (out of descriptors, say) is tried again for a while rather than taken
    for a dead keeper, which would report a job that may still run as ended."""
    assert job.attempt_dir is not None
    tries = 0
    while True:
        try:
            return read_json(str(job.attempt_dir), RESULT, missing_only=True)
        except OSError as exc:
            if tries % 60 == 0:
                log.warning(
                    "job %s: cannot read its result yet (%s); trying again", job.key[0], exc
                )
            tries += 1
            await asyncio.sleep(0.5)


def _alive(pid: int, start: int | None) -> bool:
    """Is the keeper `pid` (started at `start`, if known) still running?"""
    began = process_start(pid)
    if began is None or (start is not None and began != start):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # cannot tell (out of descriptors): assume it still runs


def finish(job: RunningJob, result: dict[str, Any] | None) -> JobResult:
    """The attempt's outcome from the keeper's result.json (None: the keeper died)."""
    if result is None:
        return JobResult(
            None, None, job.kill_reason or "the job's keeper died", job.meter, job.wall_seconds()
        )
    if "launch_error" in result:
        return JobResult(None, None, f"failed to start: {result['launch_error']}", job.meter, 0.0)
    job.meter.close(result)
    reason = job.kill_reason
    host_failure = False
    if result.get("fenced_after_s") is not None:
        reason = (
            f"killed on its host: the worker had no contact with a controller for "
            f"{result['fenced_after_s']:.0f} s (fence timeout)"
        )
        host_failure = True
    elif result.get("oom_killed"):
        reason = f"memory limit of {job.assignment.memory_mb} MB exceeded"
    code, sig = result.get("exit_code"), result.get("exit_signal")
    if sig is not None:
        code = 128 + int(sig)
    return JobResult(
        code, sig, reason, job.meter, float(result.get("wall_time_s") or 0.0), host_failure
    )
