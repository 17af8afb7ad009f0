"""One job attempt on this host: its directories, its cgroup, its keeper, its end.

Who does what (the worker is root, the job is hostile code):

* the worker's own bookkeeping for an attempt (`spec.json`, `keeper.json`, `result.json`,
  `report.json`) lives in `<spool>/state/<attempt>/`, 0700 root: a job cannot write it and
  the worker trusts nothing else about the attempt (never a pid file in the job's tree);
* the job's working directory `<jobs_dir>/<attempt>/` is the user's (0700); everything done
  inside it, and in the job's `cwd`, is done as the user (xce/worker/userfs.py);
* the process runs under a keeper (xce/worker/keeper.py) inside a cgroup of its own
  (xce/worker/cgroups): suspend freezes the cgroup, kill and requeue empty it, so nothing
  escapes by `setsid` or a double fork; usage comes from the cgroup.

The walltime limit counts running time only (suspended time is excluded, as in Slurm).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import pwd
import shutil
import signal
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from xce.core import allocation
from xce.core.model import HostSlots
from xce.store.files import job_dir_name
from xce.worker import fence, gpus, gpuusage, userfs
from xce.worker.cgroups import CgroupBackend, JobCgroup, Limits
from xce.worker.cgroups.base import CgroupError
from xce.worker.cgroups.devices import deny_entries
from xce.worker.keeper import KEEPER, RESULT, SPEC, process_start, read_json, write_json
from xce.worker.launcher import KeeperError, KeeperLauncher, keeper_alive, pidfd
from xce.worker.usage import UsageMeter
from xce.worker.userfs import Credentials

log = logging.getLogger("xce.worker.executor")

_BACKGROUND: set[asyncio.Future[None]] = set()
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REPORT = "report.json"


class LaunchError(Exception):
    """The job could not be started (unknown user, refused account, bad cwd)."""


@dataclass
class JobResult:
    exit_code: int | None
    exit_signal: int | None
    reason: str
    usage: UsageMeter
    wall_time_s: float
    host_failure: bool = False


@dataclass
class RunningJob:
    """A job attempt this worker took on, keyed by (job id, attempt)."""

    assignment: dict[str, Any]
    job_dir: Path
    work_dir: Path
    attempt_dir: Path | None = None
    creds: Credentials | None = None
    cgroup: JobCgroup | None = None
    keeper: int | None = None
    keeper_start: int | None = None  # its start time (with the pid, one process for ever)
    leader: int | None = None
    meter: UsageMeter = field(default_factory=UsageMeter)
    started: float = field(default_factory=time.monotonic)
    suspended_since: float | None = None
    suspended_total: float = 0.0
    kill_reason: str = ""
    killing: bool = False
    result: asyncio.Future[JobResult] | None = None
    # Read-only descriptors of the job's stdout and stderr, opened as the user when the files
    # were made: the live tail and the final upload read through them.
    readers: dict[str, int] = field(default_factory=dict)
    # Live tail: how many bytes of each stream the controller has taken (xce/worker/tail.py).
    sent: dict[str, int] = field(default_factory=dict)
    # Freeze and thaw run in threads (a freeze may wait seconds for a task in an unfreezable
    # sleep), one at a time per job and in the order they were asked for.
    control: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def key(self) -> tuple[str, int]:
        return (self.assignment["job_id"], self.assignment["attempt"])

    @property
    def pid(self) -> int | None:
        return self.leader

    def running_seconds(self) -> float:
        now = time.monotonic()
        paused = self.suspended_total + (now - self.suspended_since if self.suspended_since else 0)
        return now - self.started - paused

    def wall_seconds(self) -> float:
        return time.monotonic() - self.started


def attempt_name(job_id: str, attempt: int) -> str:
    return f"{job_dir_name(job_id)}.{attempt}"


# --- accounts -------------------------------------------------------------------------------


def account_for(user: str, allow_root: bool, min_uid: int = 1000) -> pwd.struct_passwd | None:
    """The account to run as; None means "as this worker's own user" (non-root worker).

    A root worker runs jobs only as accounts at or above `min_job_uid`, and as root only with
    `allow_root_jobs`, whoever submitted the job (the controller checks the same where it
    can resolve the name; this host's view of the uid is the one that counts)."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user} does not exist on this host") from None
    if account.pw_uid == 0:
        if not allow_root:
            raise LaunchError("jobs as root are refused on this host (worker.allow_root_jobs)")
    elif account.pw_uid < min_uid:
        raise LaunchError(
            f"user {user} (uid {account.pw_uid}) is a system account: jobs run "
            f"only as uids from {min_uid} (worker.min_job_uid)"
        )
    elif account.pw_uid in _system_uids():
        raise LaunchError(
            f"user {user} (uid {account.pw_uid}) is a system account (nobody, "
            "or systemd's dynamic users): jobs never run as it"
        )
    return account


def _system_uids() -> range | set[int]:
    """Uids above min_job_uid that are still system accounts: the kernel's overflow uid
    (nobody, 65534) and systemd's dynamic users (61184-65519)."""
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            overflow = int(f.read())
    except (OSError, ValueError):
        overflow = 65534
    return set(range(61184, 65520)) | {overflow, 65534, 4294967294, 4294967295}


def credentials(account: pwd.struct_passwd | None) -> Credentials | None:
    return None if account is None else Credentials.of(account)


def job_environment(
    a: dict[str, Any],
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
    env.update(a.get("env") or {})
    env.update(identity)
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
    launch = a.get("launch")
    if isinstance(launch, dict):  # issue 15: what `xce launch` needs (xce/cli/launch.py)
        env["XCE_LAUNCH_CRED"] = str(launch.get("credential") or "")
        env["XCE_LAUNCH_TASKS"] = ",".join(
            f"{h}={addr}" for h, addr in (launch.get("tasks") or {}).items() if addr
        )
        if launch.get("bin"):  # this worker's own `xce` first, whatever the job's PATH
            env["XCE_LAUNCH"] = str(Path(launch["bin"]) / "xce")
            env["PATH"] = f"{launch['bin']}:{env.get('PATH', BASE_PATH)}"
    shares = allocation_of(a)
    if shares:  # issue 15: the whole allocation, like LSB_HOSTS / LSB_DJOB_HOSTFILE
        env.update(allocation.job_environment(shares))
        if job_dir is not None:
            env["XCE_HOSTFILE"] = str(job_dir / ".xce" / "hostfile")
    return env


def allocation_of(a: dict[str, Any]) -> list[HostSlots]:
    """The assignment's hosts and slots (none from a controller that does not send them)."""
    return [HostSlots(str(h), int(n)) for h, n in a.get("hosts") or ()]


# --- directories ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spool:
    """The worker's directories: `state` (root only) and `jobs` (the users' job dirs)."""

    root: Path
    jobs: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    def make(self) -> None:
        """Create them with the right modes; the job users may only traverse `jobs`."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.state.mkdir(exist_ok=True, mode=0o700)
        os.chmod(self.state, 0o700)
        self.jobs.mkdir(parents=True, exist_ok=True, mode=0o711)
        if os.geteuid() == 0:
            real = Path(os.path.realpath(self.jobs))
            for path in (self.jobs, real, *real.parents):
                unsafe = _unsafe_for_root(path)
                if unsafe:
                    raise SpoolError(
                        f"{path} {unsafe}: another user could swap the job "
                        "directories under it (set [worker] jobs_dir to a "
                        "directory only root controls)"
                    )
            os.chmod(self.jobs, 0o711)
            blocked = [p for p in (self.jobs, *self.jobs.parents) if not os.stat(p).st_mode & 0o001]
            if blocked:
                log.warning(
                    "jobs of users other than root cannot reach their directories: "
                    "%s is not searchable by others (set [worker] jobs_dir)",
                    blocked[0],
                )


class SpoolError(Exception):
    """The worker's directories are not safe to run jobs in; the message says why."""


def _unsafe_for_root(path: Path) -> str:
    """Why root must not trust `path` (like sshd's StrictModes), or "" if it may: owned by
    root, and writable by nobody else unless sticky (then others cannot rename what root
    owns in it, as in /tmp)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if st.st_uid != 0:
        return f"belongs to uid {st.st_uid}, not root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return "is writable by group or others"
    return ""


async def remove_job_dir(job_dir: Path, creds: Credentials | None) -> None:
    """Empty a job directory as its user (symlinks are removed, never followed), then
    remove the directory itself (root may: its parent is the worker's)."""
    try:
        await userfs.as_user(creds, userfs.remove_tree, str(job_dir))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("cannot empty %s: %s", job_dir, exc)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(job_dir)


def _owner_credentials(path: Path) -> Credentials | None:
    """The credentials of a directory's owner (to clean up a leftover as that user)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if os.geteuid() != 0 or st.st_uid == 0:
        return None
    try:
        return Credentials.of(pwd.getpwuid(st.st_uid))
    except KeyError:
        return Credentials(st.st_uid, st.st_gid, (), str(st.st_uid))


async def prepare(spool: Spool, a: dict[str, Any], account: pwd.struct_passwd | None) -> RunningJob:
    """The attempt's state directory (root) and job directory (the user's, 0700)."""
    name = attempt_name(a["job_id"], a["attempt"])
    attempt_dir = spool.state / name
    if attempt_dir.exists():
        shutil.rmtree(attempt_dir)  # a start that never got as far as its keeper
    attempt_dir.mkdir(mode=0o700)
    job_dir = spool.jobs / name
    if os.path.lexists(job_dir):
        await remove_job_dir(job_dir, _owner_credentials(job_dir))
    os.mkdir(job_dir, 0o700)
    if account is not None:
        os.chown(job_dir, account.pw_uid, account.pw_gid, follow_symlinks=False)
    work_dir = Path(a["cwd"]) if a.get("cwd") else job_dir
    return RunningJob(a, job_dir, work_dir, attempt_dir, credentials(account))


# --- launching ------------------------------------------------------------------------------


def limits_for(a: dict[str, Any], pids_limit: int, host_memory_mb: int | None = None) -> Limits:
    """The cgroup limits of an attempt: `--mem` (else the host's memory as the worker
    declares it, default all of it: no job takes the worker's own), its slots as CPUs, the
    worker's task limit."""
    if host_memory_mb is None:
        host_memory_mb = psutil.virtual_memory().total // 2**20
    memory = a.get("memory_mb") or host_memory_mb
    return Limits(
        memory_bytes=memory * 1024 * 1024 if memory else None,
        cpus=int(a.get("slots") or 1),
        pids=pids_limit or None,
    )


async def launch(
    job: RunningJob,
    launcher: KeeperLauncher,
    backend: CgroupBackend,
    account: pwd.struct_passwd | None,
    host: str,
    pids_limit: int,
    worker_state: Path,
    contact: fence.Contact,
    host_memory_mb: int | None = None,
    private_tmp: bool = False,
    devices: gpus.HostDevices | None = None,
) -> None:
    """Make the job's files (as the user), its cgroup, and have a keeper start it."""
    a = job.assignment
    devices = devices or gpus.HostDevices()
    assert job.attempt_dir is not None
    shares = allocation_of(a)
    files = await userfs.as_user(
        job.creds,
        userfs.prepare_job_files,
        str(job.job_dir),
        a.get("script"),
        allocation.hostfile_text(shares) if shares else None,
    )
    job.readers = {"stdout": files.stdout_reader, "stderr": files.stderr_reader}
    try:
        if files.script is not None:
            argv = [files.script] if a["script"].startswith("#!") else ["/bin/sh", files.script]
        else:
            argv = ["/bin/sh", "-c", a["command"]]
        name = attempt_name(a["job_id"], a["attempt"])
        limits = limits_for(a, pids_limit, host_memory_mb)
        # the v1 devices hierarchy or a v2 device program (only then): "none" cannot fence
        if backend.kind in ("v1", "v2") and devices.gpus:
            try:
                deny = deny_entries(gpus.denied_nodes(a, devices))
            except CgroupError as exc:
                raise LaunchError(str(exc)) from None
            limits = dataclasses.replace(limits, devices_deny=deny)
        env = job_environment(a, account, job.work_dir, host, job.job_dir)
        env.update(gpus.job_env(a, devices))  # after the submitted ones: XCE owns them
        write_json(
            str(job.attempt_dir),
            SPEC,
            {
                "job_id": a["job_id"],
                "attempt": a["attempt"],
                "assignment": a,
                "argv": argv,
                "env": env,
                "cwd": str(job.work_dir),
                "job_dir": str(job.job_dir),
                "user": account.pw_name if account else None,
                "uid": job.creds.uid if job.creds else None,
                "gid": job.creds.gid if job.creds else None,
                "groups": list(job.creds.groups) if job.creds else None,
                "cgroup": name,
                "worker_state": str(worker_state),
                "limits": dataclasses.asdict(limits),
                "contact": {"at": contact.at, "fence_timeout_s": contact.fence_timeout_s},
                "private_tmp": private_tmp
                and not any(_under_tmp(path) for path in (job.work_dir, job.job_dir)),
            },
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


def _under_tmp(path: Path) -> bool:
    """Whether `path` lies in /tmp as written: a private /tmp would hide it from the job,
    so such a job (one submitted from /tmp, or any job of a worker whose jobs_dir is there)
    keeps the host's /tmp. A link from elsewhere into /tmp is not followed here (root does
    not resolve the user's paths); such a `cwd` ends the job with a clear launch error."""
    normal = "/" + os.path.normpath(path).lstrip("/")  # "//tmp" is /tmp too
    return normal == "/tmp" or normal.startswith("/tmp/")


def drop_cgroup(cgroup: JobCgroup | None) -> None:
    """Kill what is in `cgroup` and remove it (a task may have joined after a final kill)."""
    _drop_cgroup(cgroup)


def _drop_cgroup(cgroup: JobCgroup | None) -> None:
    if cgroup is None:
        return
    with contextlib.suppress(OSError):
        cgroup.kill()
    with contextlib.suppress(OSError):
        cgroup.remove()


def close_readers(job: RunningJob) -> None:
    """Close the output descriptors once nothing reads the job's output through them."""
    readers, job.readers = job.readers, {}
    for fd in readers.values():
        with contextlib.suppress(OSError):
            os.close(fd)


# --- control --------------------------------------------------------------------------------


def _cgroup_call(job: RunningJob, what: str, *args: Any) -> None:
    if job.cgroup is None:
        return
    try:
        getattr(job.cgroup, what)(*args)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
            log.warning("job %s: %s failed: %s", job.key[0], what, exc)


async def suspend(job: RunningJob) -> None:
    """Freeze every process of the job at once (the cgroup freezer), off the event loop: a
    job can hold a task where the freezer cannot reach it (an exec waiting on a ptrace
    attach), and the freeze then waits its whole timeout; the worker's heartbeats, and with
    them every other job's fence, must not wait with it."""
    if job.suspended_since is not None or job.killing:
        return
    job.suspended_since = time.monotonic()
    async with job.control:
        frozen = await asyncio.to_thread(_frozen, job)
    if not frozen:
        log.warning(
            "job %s: not every process froze in time (a task in an uninterruptible "
            "sleep); it is thawed when resumed or killed",
            job.key[0],
        )


def _frozen(job: RunningJob) -> bool:
    if job.cgroup is None:
        return True
    try:
        return bool(job.cgroup.freeze())
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
            log.warning("job %s: freeze failed: %s", job.key[0], exc)
        return True


async def resume(job: RunningJob) -> None:
    if job.suspended_since is None:
        return
    job.suspended_total += time.monotonic() - job.suspended_since
    job.suspended_since = None
    async with job.control:
        await asyncio.to_thread(_cgroup_call, job, "thaw")


async def kill(job: RunningJob, reason: str, grace: float) -> None:
    """SIGTERM to every process (thawed first so it can act), then the whole cgroup is
    killed after `grace` seconds if the job has not ended."""
    if job.killing:
        return
    job.killing = True
    job.kill_reason = reason
    if job.suspended_since is not None:
        job.suspended_total += time.monotonic() - job.suspended_since
        job.suspended_since = None
    async with job.control:  # off the loop: the freezer can wait (see suspend)
        await asyncio.to_thread(_terminate, job)
    if job.result is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(job.result), grace)
    except TimeoutError:
        await asyncio.to_thread(_cgroup_call, job, "kill")


def _terminate(job: RunningJob) -> None:
    """SIGTERM to every task at once (sent while frozen, so a forking job misses none), then
    SIGCONT so that tasks the user had stopped can act on it."""
    _cgroup_call(job, "thaw")
    _cgroup_call(job, "signal_all", signal.SIGTERM)
    _cgroup_call(job, "signal", signal.SIGCONT)


def kill_group_now(job: RunningJob) -> None:
    """Kill every process of the job at once (used when the worker lost track of it)."""
    _cgroup_call(job, "kill")


def _start_kill(job: RunningJob, reason: str, grace: float) -> None:
    killer = asyncio.ensure_future(kill(job, reason, grace))
    _BACKGROUND.add(killer)
    killer.add_done_callback(_BACKGROUND.discard)


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
            if job.assignment.get("devices"):  # its GPUs' utilisation and memory (NVML)
                job.meter.gpus.sample(gpuusage.READER, job.assignment["devices"])
            walltime = job.assignment.get("walltime_s")  # read each time: `job modify`
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
        reason = f"memory limit of {job.assignment.get('memory_mb')} MB exceeded"
    code, sig = result.get("exit_code"), result.get("exit_signal")
    if sig is not None:
        code = 128 + int(sig)
    return JobResult(
        code, sig, reason, job.meter, float(result.get("wall_time_s") or 0.0), host_failure
    )


# --- after a worker restart ------------------------------------------------------------------


@dataclass
class Recovered:
    """An attempt an earlier worker process took on: still running (adopt it), ended with a
    result (report it), or already reported to be sent (`report`)."""

    job: RunningJob
    alive: bool = False
    report: dict[str, Any] | None = None
    lost: str = ""


async def recover(spool: Spool, backend: CgroupBackend) -> list[Recovered]:
    """Every attempt found in the worker's own state directory (never in the job's tree).

    A keeper that is still alive (same pid and start time as it recorded) is adopted; an
    attempt with no live keeper and no result has its cgroup killed. Cgroups that no attempt
    claims are killed and removed too."""
    found: list[Recovered] = []
    claimed: set[str] = set()
    for attempt_dir in sorted(spool.state.iterdir()) if spool.state.is_dir() else []:
        if not attempt_dir.is_dir() or attempt_dir.is_symlink():
            continue
        spec = read_json(str(attempt_dir), SPEC)
        if spec is None:
            shutil.rmtree(attempt_dir, ignore_errors=True)
            continue
        claimed.add(spec["cgroup"])
        creds = None
        if spec.get("uid") is not None:
            creds = Credentials(
                int(spec["uid"]),
                int(spec["gid"]),
                tuple(int(g) for g in spec["groups"]),
                str(spec["user"]),
            )
        job = RunningJob(
            spec["assignment"], Path(spec["job_dir"]), Path(spec["cwd"]), attempt_dir, creds
        )
        report = read_json(str(attempt_dir), REPORT)
        if report is not None:
            found.append(Recovered(job, report=report))
            continue
        keeper = read_json(str(attempt_dir), KEEPER)
        job.cgroup = backend.open(spec["cgroup"], keeper.get("leader") if keeper else None)
        if read_json(str(attempt_dir), RESULT) is not None:
            job.keeper = int(keeper["keeper"]) if keeper else None
            found.append(Recovered(job))
            continue
        if keeper is not None and keeper_alive(int(keeper["keeper"]), keeper.get("keeper_start")):
            job.keeper, job.leader = int(keeper["keeper"]), int(keeper["leader"])
            job.keeper_start = keeper.get("keeper_start")
            job.started -= max(0.0, fence.now() - float(keeper.get("started_at", fence.now())))
            with contextlib.suppress(OSError):
                job.readers = await userfs.as_user(creds, open_readers, str(job.job_dir))
            found.append(Recovered(job, alive=True))
            continue
        await asyncio.to_thread(_drop_cgroup, job.cgroup)
        job.cgroup = None
        found.append(
            Recovered(
                job,
                lost="the worker restarted and the job's keeper was gone"
                if keeper
                else "failed to start: the worker restarted",
            )
        )
    for name in backend.existing():
        if name not in claimed:
            log.warning("killing cgroup %s: no attempt of this worker claims it", name)
            await asyncio.to_thread(_drop_cgroup, backend.open(name))
    return found


def open_readers(job_dir: str) -> dict[str, int]:
    """Read descriptors of `.xce/stdout` and `.xce/stderr` (run as the user; no symlinks)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.open(job_dir, flags | os.O_DIRECTORY)
    try:
        meta = os.open(".xce", flags | os.O_DIRECTORY, dir_fd=top)
    finally:
        os.close(top)
    readers: dict[str, int] = {}
    try:
        for name in ("stdout", "stderr"):
            try:
                # O_NONBLOCK: a FIFO planted in place of the file cannot hang this thread.
                fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=meta)
            except OSError:
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                readers[name] = fd
            else:
                os.close(fd)
    finally:
        os.close(meta)
    return readers


def save_report(job: RunningJob, body: dict[str, Any]) -> None:
    """Persist a finish report in the worker's own directory, so a restart still sends it."""
    if job.attempt_dir is not None:
        write_json(str(job.attempt_dir), REPORT, body, durable=True)
