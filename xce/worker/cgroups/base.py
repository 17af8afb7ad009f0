"""The contract every cgroup backend keeps, and the small file helpers they share.

The worker (root) contains each job attempt in a `JobCgroup` made by a `CgroupBackend`. The
per-job keeper imports this package at start, so it uses the standard library only, and every
kernel file is read or written with one `os` call (cgroupfs takes a value in one write).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
MAX_NAME = 200


class CgroupError(RuntimeError):
    """A cgroup could not be set up or acted on; the message says which file and why."""


@dataclass(frozen=True)
class Limits:
    """What a job attempt may use. None means "not limited"."""

    memory_bytes: int | None = None  # memory + swap; the job is OOM-killed above it
    cpus: int | None = None  # slots: a cpuset of that many cores if free, else a CPU quota
    pids: int | None = None  # max tasks (processes and threads)
    # Device nodes the job may not open, "c MAJ:MIN rwm" (the other GPUs of the host; v1's
    # devices controller, xce/worker/cgroups/devices.py, or v2's eBPF device program,
    # devbpf.py); empty: no devices cgroup or program at all.
    devices_deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class CgroupUsage:
    """Whole-job figures from the kernel's accounting (shared pages counted once)."""

    cpu_user_s: float
    cpu_system_s: float
    memory_peak_bytes: int  # high-water mark of the job's memory, not RSS summed per process
    memory_current_bytes: int


class JobCgroup(Protocol):
    """One job attempt's containment. Every method tolerates processes that have just exited."""

    name: str
    cpus: tuple[int, ...]  # cores of its cpuset; () when it got a quota or no CPU limit

    def enter(self) -> None:
        """Join the calling process to the cgroup(s); called in the forked child before exec.

        Uses os-level calls only (safe in a single-threaded child after fork). Raises OSError
        when the kernel refuses; the child should then _exit without running the job.
        """

    def set_leader(self, pid: int) -> None:
        """Tell the cgroup the job's leader pid (used by "none"; a no-op for v1/v2)."""

    def pids(self) -> list[int]:
        """Every live process of the job (zombies excluded)."""

    def signal(self, sig: int) -> None:
        """Send `sig` to every process of the job (racy against forks; use kill() to end it)."""

    def signal_all(self, sig: int) -> None:
        """Send `sig` to every process at once where the backend can freeze the job (frozen
        tasks cannot fork, so none is missed); delivered at thaw; leaves the job thawed."""

    def freeze(self) -> bool:
        """Stop every task at once; True when the kernel reports it frozen within ~2 s."""

    def thaw(self) -> None:
        """Undo freeze()."""

    def kill(self) -> bool:
        """SIGKILL everything, race-free against forks; True when the job is empty.

        Returns when empty or after a bounded wait (~5 s); it leaves the cgroup thawed.
        """

    def usage(self) -> CgroupUsage:
        """CPU and memory of the whole job so far."""

    def oom_killed(self) -> bool:
        """True when the kernel OOM-killed a task of this job (its memory limit was hit)."""

    def remove(self) -> None:
        """Remove every directory of the cgroup (call after kill); already-gone is fine."""

    def describe(self) -> dict[str, object]:
        """Paths and the limits as the kernel holds them, for logs."""


class CgroupBackend(Protocol):
    """Makes and finds the job cgroups of one worker (one namespace directory)."""

    kind: str  # "v2", "v1" or "none"

    def create(self, name: str, limits: Limits) -> JobCgroup:
        """A fresh cgroup `name` with `limits`; a leftover of that name is killed and replaced."""

    def open(self, name: str, leader_pid: int | None = None) -> JobCgroup | None:
        """The existing cgroup `name` (after a worker restart), or None if there is none."""

    def existing(self) -> list[str]:
        """Names of the job cgroups in this backend's namespace, sorted."""

    def describe(self) -> dict[str, object]:
        """Kind, which limits are enforced (booleans), parent path(s) and cores."""


# ---------------------------------------------------------------------------------------------
# helpers shared by the backends


def check_name(name: str, what: str = "cgroup name") -> str:
    """Return `name` if it is one safe path component ([A-Za-z0-9._-]+), else ValueError."""
    if (
        not isinstance(name, str)
        or not NAME_RE.fullmatch(name)
        or name in (".", "..")
        or len(name) > MAX_NAME
    ):
        raise ValueError(f"bad {what} {name!r}: use 1-{MAX_NAME} of [A-Za-z0-9._-], not . or ..")
    return name


def check_limits(limits: Limits) -> None:
    """ValueError unless every set limit is a positive int."""
    for field in ("memory_bytes", "cpus", "pids"):
        value = getattr(limits, field)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value <= 0
        ):
            raise ValueError(f"Limits.{field} must be a positive int or None, not {value!r}")
    if limits.devices_deny:
        from xce.worker.cgroups.devices import check_entries

        check_entries(limits.devices_deny)


def read(path: str) -> str:
    """The content of a kernel file, stripped."""
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read().strip()


def read_opt(path: str) -> str | None:
    """Like read(), but None when the file (or its cgroup) does not exist."""
    try:
        return read(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno in (errno.ENODEV, errno.ENOENT):
            return None
        raise


def write(path: str, value: str) -> None:
    """Write `value` to a kernel file in one write() call (how cgroupfs wants it)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def keyed(text: str | None) -> dict[str, int]:
    """Parse "key value" lines (cpu.stat, memory.events, cgroup.events...) into ints."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_cpus(text: str | None) -> tuple[int, ...]:
    """'0-3,6' -> (0, 1, 2, 3, 6)."""
    cores: set[int] = set()
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(cores))


def format_cpus(cores: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cores)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def procs_of(dir_: str) -> list[int]:
    """Pids in cgroup `dir_` and any cgroups below it (a job cannot hide in a sub-cgroup)."""
    pids: list[int] = []
    for root, _dirs, _files in os.walk(dir_):
        text = read_opt(os.path.join(root, "cgroup.procs"))
        pids.extend(int(p) for p in (text or "").split())
    return sorted(set(pids))


def send(pids: Iterable[int], sig: int) -> None:
    """Send `sig` to each pid; processes that already exited are skipped."""
    for pid in pids:
        if pid <= 1:
            continue  # never signal init or a whole process group by accident
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.005) -> bool:
    """Poll `pred` until it is true or `timeout` seconds passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
        step = min(step * 1.5, 0.05)


def join(procs_file: str) -> None:
    """Move the calling process into the cgroup whose cgroup.procs is `procs_file`."""
    fd = os.open(procs_file, os.O_WRONLY)
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)


def signal_frozen(
    freeze: Callable[[float], bool],
    thaw: Callable[[], None],
    pids: Callable[[], list[int]],
    sig: int,
) -> None:
    """Freeze (for at most half a second: a task the freezer cannot reach must not hold the
    kill up), signal every task read while frozen, thaw."""
    freeze(0.5)
    try:
        send(pids(), sig)
    finally:
        thaw()


def freeze_kill_loop(
    freeze: Callable[[], bool],
    thaw: Callable[[], None],
    pids: Callable[[], list[int]],
    timeout: float,
) -> bool:
    """Kill everything with the freezer: freeze, SIGKILL all, thaw, until empty or `timeout`.

    Frozen tasks cannot fork, so the pids read while frozen are the whole job; the kills are
    delivered at thaw. A fork in flight at freeze time is caught by the next round.
    """
    deadline = time.monotonic() + timeout
    while True:
        if not pids():
            return True
        freeze()
        send(pids(), signal.SIGKILL)
        thaw()
        left = max(0.0, deadline - time.monotonic())
        if wait_until(lambda: not pids(), min(0.25, left)):
            return True
        if time.monotonic() >= deadline:
            return False


def rmdir_tree(dir_: str, timeout: float = 1.0) -> None:
    """rmdir a cgroup directory and any below it, bottom-up; gone already is fine.

    EBUSY (a task still exiting) is retried until `timeout`, then raised as CgroupError.
    """
    if not os.path.isdir(dir_):
        return
    subdirs = [root for root, _d, _f in os.walk(dir_)]
    for d in sorted(subdirs, key=len, reverse=True):
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise CgroupError(f"cannot remove {d}: {e.strerror}") from e
                time.sleep(0.02)
