"""Runs one job as a real process: its own session and process group, its user, its files.

Suspend is SIGSTOP to the whole group, resume SIGCONT, kill SIGTERM then SIGKILL after a
grace period. The walltime limit counts running time only (suspended time is excluded, as in
Slurm). When the leader exits, whatever is left of its group is killed, so a job cannot leave
processes behind on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import json
import logging
import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from xce.store.files import job_dir_name
from xce.worker.usage import UsageMeter

log = logging.getLogger("xce.worker.executor")

_BACKGROUND: set[asyncio.Future[None]] = set()
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LaunchError(Exception):
    """The job could not be started (unknown user, root refused, bad cwd)."""


@dataclass
class JobResult:
    exit_code: int | None
    exit_signal: int | None
    reason: str
    usage: UsageMeter
    wall_time_s: float


@dataclass
class RunningJob:
    """A job process this worker started, keyed by (job id, attempt)."""

    assignment: dict[str, Any]
    job_dir: Path
    work_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    meter: UsageMeter | None = None
    started: float = field(default_factory=time.monotonic)
    suspended_since: float | None = None
    suspended_total: float = 0.0
    kill_reason: str = ""
    killing: bool = False
    result: asyncio.Future[JobResult] | None = None
    # Read-only descriptors of the files the job writes its stdout and stderr to, opened
    # before it starts: the live tail and the final upload read through them, so a job
    # that swaps `.xce/stdout` for a symlink cannot make the worker read another file.
    readers: dict[str, int] = field(default_factory=dict)
    # Live tail: how many bytes of each stream the controller has taken (xce/worker/tail.py).
    sent: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (self.assignment["job_id"], self.assignment["attempt"])

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running_seconds(self) -> float:
        now = time.monotonic()
        paused = self.suspended_total + (now - self.suspended_since if self.suspended_since else 0)
        return now - self.started - paused

    def wall_seconds(self) -> float:
        return time.monotonic() - self.started


def account_for(user: str, allow_root: bool) -> pwd.struct_passwd | None:
    """The account to run as; None means "as this worker's own user" (non-root worker)."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user} does not exist on this host") from None
    if account.pw_uid == 0 and not allow_root:
        raise LaunchError("jobs as root are refused on this host (worker.allow_root_jobs)")
    return account


def job_environment(a: dict[str, Any], account: pwd.struct_passwd | None, work_dir: Path,
                    host: str) -> dict[str, str]:
    """A clean environment: login basics, the user's variables, then XCE's own."""
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
    env.update(a.get("env") or {})
    env.update(
        XCE_JOB_ID=a["job_id"],
        XCE_JOB_NAME=a.get("name") or "",
        XCE_QUEUE=a.get("queue") or "",
        XCE_SLOTS=str(a.get("slots", 1)),
        XCE_ATTEMPT=str(a["attempt"]),
        XCE_EXEC_HOST=host,
        XCE_JOB_DIR=str(work_dir),
    )
    if a.get("array_index") is not None:
        env["XCE_ARRAY_ID"] = str(a["number"])
        env["XCE_ARRAY_INDEX"] = str(a["array_index"])
    return env


def prepare_dirs(spool: Path, a: dict[str, Any], account: pwd.struct_passwd | None) -> RunningJob:
    job_dir = spool / "jobs" / f"{job_dir_name(a['job_id'])}.{a['attempt']}"
    (job_dir / ".xce").mkdir(parents=True, exist_ok=True, mode=0o700)
    if account is not None:
        for path in (job_dir, job_dir / ".xce"):
            os.chown(path, account.pw_uid, account.pw_gid)
    # The key marks "this attempt was taken on here": after a restart the worker reports it
    # as ended instead of starting it again.
    (job_dir / ".xce" / "key").write_text(json.dumps({"job_id": a["job_id"],
                                                       "attempt": a["attempt"]}))
    work_dir = Path(a["cwd"]) if a.get("cwd") else job_dir
    if not work_dir.is_dir():
        raise LaunchError(f"working directory {work_dir} does not exist on this host")
    return RunningJob(a, job_dir, work_dir)


def launch(job: RunningJob, host: str, allow_root: bool) -> None:
    """Start the process (synchronously; it is a fork+exec)."""
    a = job.assignment
    account = account_for(a["user"], allow_root)
    meta = job.job_dir / ".xce"
    if a.get("script") is not None:
        script = meta / "script"
        script.write_text(a["script"])
        script.chmod(0o700)
        if account is not None:
            os.chown(script, account.pw_uid, account.pw_gid)
        argv = [str(script)] if a["script"].startswith("#!") else ["/bin/sh", str(script)]
    else:
        argv = ["/bin/sh", "-c", a["command"]]
    env = job_environment(a, account, job.work_dir, host)
    kwargs: dict[str, Any] = {}
    if account is not None and account.pw_uid != os.geteuid():
        groups = [g.gr_gid for g in grp.getgrall() if account.pw_name in g.gr_mem]
        kwargs.update(user=account.pw_uid, group=account.pw_gid, extra_groups=groups)
    out_mode = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    stdout = os.open(meta / "stdout", out_mode, 0o600)
    stderr = os.open(meta / "stderr", out_mode, 0o600)
    try:
        for name, fd in (("stdout", stdout), ("stderr", stderr)):
            try:
                job.readers[name] = _reader_for(meta / name, fd)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                # Out of descriptors: run the job anyway, without a live tail of it.
                log.warning("job %s: no descriptor left for its %s tail", job.key[0], name)
        if account is not None:
            for fd in (stdout, stderr):
                os.fchown(fd, account.pw_uid, account.pw_gid)
        fork_baseline = psutil.Process().memory_info().rss
        job.proc = subprocess.Popen(
            argv,
            cwd=job.work_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
            **kwargs,
        )
    except OSError as exc:
        close_readers(job)
        raise LaunchError(f"cannot start the job: {exc.strerror or exc}") from None
    finally:
        os.close(stdout)
        os.close(stderr)
    job.started = time.monotonic()
    job.meter = UsageMeter(job.proc.pid, fork_baseline)
    try:
        (meta / "pid").write_text(f"{job.proc.pid}\n")
    except OSError as exc:
        # Untracked it could outlive a worker restart: better not to run it at all.
        _signal_group(job, signal.SIGKILL)
        job.proc.wait()
        raise LaunchError(f"cannot record the job's pid: {exc.strerror or exc}") from None


def _reader_for(path: Path, writer: int) -> int:
    """A read-only descriptor of the very file `writer` writes (checked by inode)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    ours, theirs = os.fstat(fd), os.fstat(writer)
    if (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino):
        os.close(fd)
        raise OSError(f"{path} changed while the job was set up")
    return fd


def close_readers(job: RunningJob) -> None:
    """Close the output descriptors once nothing reads the job's output through them."""
    readers, job.readers = job.readers, {}
    for fd in readers.values():
        with contextlib.suppress(OSError):
            os.close(fd)


def _signal_group(job: RunningJob, sig: int) -> None:
    if job.proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.proc.pid, sig)


def suspend(job: RunningJob) -> None:
    if job.suspended_since is None and not job.killing:
        _signal_group(job, signal.SIGSTOP)
        job.suspended_since = time.monotonic()


def resume(job: RunningJob) -> None:
    if job.suspended_since is not None:
        _signal_group(job, signal.SIGCONT)
        job.suspended_total += time.monotonic() - job.suspended_since
        job.suspended_since = None


async def kill(job: RunningJob, reason: str, grace: float) -> None:
    """SIGTERM (and SIGCONT so a stopped job can act on it), SIGKILL after `grace` seconds."""
    if job.killing:
        return
    job.killing = True
    job.kill_reason = reason
    _signal_group(job, signal.SIGTERM)
    _signal_group(job, signal.SIGCONT)
    if job.suspended_since is not None:
        job.suspended_total += time.monotonic() - job.suspended_since
        job.suspended_since = None
    if job.result is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(job.result), grace)
    except TimeoutError:
        _signal_group(job, signal.SIGKILL)


async def wait(job: RunningJob, usage_interval: float, grace: float) -> JobResult:
    """Wait for the leader to exit, sampling usage and enforcing the walltime limit."""
    assert job.proc is not None and job.meter is not None
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[tuple[int, Any]] = loop.create_future()
    pid = job.proc.pid
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:  # kernels before 5.3: poll instead
        pidfd = None

    def on_exit() -> None:
        try:
            waited, status, rusage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            waited, status, rusage = pid, 0, None
        if waited and not exited.done():
            exited.set_result((status, rusage))

    if pidfd is not None:
        loop.add_reader(pidfd, on_exit)
    walltime = job.assignment.get("walltime_s")
    # Sample densely at first so short jobs still get a memory figure.
    delays = [0.02, 0.1, 0.3, 0.6]
    try:
        while not exited.done():
            if pidfd is None:
                on_exit()
            job.meter.sample()
            if walltime and not job.killing and job.running_seconds() > walltime:
                log.info("job %s exceeded its walltime of %ss", job.key[0], walltime)
                killer = asyncio.ensure_future(kill(job, "walltime limit exceeded", grace))
                _BACKGROUND.add(killer)
                killer.add_done_callback(_BACKGROUND.discard)
            with contextlib.suppress(TimeoutError):
                delay = delays.pop(0) if delays else usage_interval
                if pidfd is None:
                    delay = min(delay, 0.2)
                await asyncio.wait_for(asyncio.shield(exited), min(delay, usage_interval))
    finally:
        if pidfd is not None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
    status, rusage = exited.result()
    job.proc.returncode = os.waitstatus_to_exitcode(status) if rusage is not None else 0
    # Leftover processes of the job's group go with it.
    _signal_group(job, signal.SIGKILL)
    job.meter.close(rusage)
    if rusage is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        code, sig_out = 128 + sig, sig
    else:
        code = os.WEXITSTATUS(status) if rusage is not None else None
        sig_out = None
    return JobResult(code, sig_out, job.kill_reason, job.meter, job.wall_seconds())


def kill_group_now(job: RunningJob) -> None:
    """SIGKILL the whole group at once (used when the worker lost track of a job)."""
    _signal_group(job, signal.SIGKILL)


def write_result(job_dir: Path, body: dict[str, Any]) -> None:
    """Persist a finish report before the pid file goes, so a restart can still send it."""
    meta = job_dir / ".xce"
    tmp = meta / "result.tmp"
    with tmp.open("w") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta / "result")
    with contextlib.suppress(OSError):
        (meta / "pid").unlink()


def recover_spool(spool: Path) -> list[tuple[tuple[str, int], dict[str, Any], Path]]:
    """After a worker restart: every attempt a previous worker process took on.

    Each comes back as ended, with the report to send: the saved result if it finished, or
    an EXIT if it was still running (its process group is killed now) or never launched.
    """
    found = []
    for key_file in (spool / "jobs").glob("*/.xce/key"):
        meta = key_file.parent
        try:
            raw = json.loads(key_file.read_text())
            key = (str(raw["job_id"]), int(raw["attempt"]))
        except (ValueError, OSError, KeyError, TypeError):
            continue
        body: dict[str, Any] | None = None
        with contextlib.suppress(ValueError, OSError):
            body = json.loads((meta / "result").read_text())
        pid_file = meta / "pid"
        if pid_file.exists():
            try:
                pid = int(pid_file.read_text().strip())
                # Only a process at least as old as the pid file is ours, not a reused pid.
                if psutil.Process(pid).create_time() <= pid_file.stat().st_mtime + 5:
                    os.killpg(pid, signal.SIGKILL)
            except (ValueError, OSError, psutil.Error):
                pass
            with contextlib.suppress(OSError):
                pid_file.unlink()
            if body is None:
                body = {"attempt": key[1], "exit_code": None,
                        "reason": "the worker restarted while the job ran"}
        if body is None:
            body = {"attempt": key[1], "exit_code": None,
                    "reason": "failed to start: the worker restarted"}
        found.append((key, body, meta.parent))
    return found
