"""cgroup v2: each job in `<mount>/<parent>/<namespace>/<name>`.

At start the backend enables whatever of memory, cpu, cpuset and pids the parent offers
(cgroup.controllers) in the parent's and the namespace's cgroup.subtree_control. The kernel
refuses that (EBUSY, the "no internal processes" rule) while the parent holds processes; when
the parent is this process's own cgroup (the usual case: a systemd unit with Delegate=yes), the
processes of that cgroup (the worker's own unit) are moved to the leaf
`<parent>/<namespace>-agent` and the write is retried, as systemd's delegation guide says.
When that is not possible the job cgroups are made without those controllers, and describe()
reports them as not enforced (the job then still gets freeze, kill and CPU accounting, which
need no controller).

Promised: memory.max = limit with memory.swap.max = 0 (swap does not extend it) and
memory.oom.group = 1 (an OOM kill ends the whole job, not one random task); cpuset.cpus of
cores no sibling job holds (lowest first), else cpu.max = cpus x 100 ms per 100 ms; pids.max;
kill() through cgroup.kill (Linux >= 5.14; earlier, freeze + SIGKILL rounds).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal as _signal
import time
from collections.abc import Iterator

from xce.worker.cgroups import devbpf
from xce.worker.cgroups.base import (
    CgroupError,
    CgroupUsage,
    Limits,
    check_limits,
    check_name,
    format_cpus,
    freeze_kill_loop,
    join,
    keyed,
    parse_cpus,
    procs_of,
    read_opt,
    rmdir_tree,
    send,
    signal_frozen,
    wait_until,
    write,
)

WANT = ("memory", "cpu", "cpuset", "pids")
CPU_PERIOD_US = 100_000
FREEZE_WAIT_S = 2.0
KILL_WAIT_S = 5.0


class V2JobCgroup:
    """One job's cgroup v2 directory."""

    def __init__(self, name: str, path: str, cpus: tuple[int, ...] = ()) -> None:
        self.name = name
        self.cpus = cpus
        self.path = path
        self._procs_file = os.path.join(path, "cgroup.procs")  # ready for enter() after fork
        self._peak_seen = 0  # fallback high-water mark where memory.peak is missing

    def _f(self, name: str) -> str:
        return os.path.join(self.path, name)

    def enter(self) -> None:
        join(self._procs_file)

    def set_leader(self, pid: int) -> None:
        pass

    def pids(self) -> list[int]:
        return procs_of(self.path)

    def signal(self, sig: int) -> None:
        send(self.pids(), sig)

    def signal_all(self, sig: int) -> None:
        signal_frozen(self._freeze, self.thaw, self.pids, sig)

    def _events(self) -> dict[str, int]:
        return keyed(read_opt(self._f("cgroup.events")))

    def _freeze(self, timeout: float) -> bool:
        if not os.path.exists(self._f("cgroup.freeze")):  # Linux < 5.2: SIGSTOP, racy
            self.signal(_signal.SIGSTOP)
            return True
        try:
            write(self._f("cgroup.freeze"), "1")
        except FileNotFoundError:
            return True  # the cgroup is gone: nothing left to freeze
        return wait_until(lambda: self._events().get("frozen", 1) == 1, timeout)

    def freeze(self) -> bool:
        return self._freeze(FREEZE_WAIT_S)

    def thaw(self) -> None:
        if not os.path.exists(self._f("cgroup.freeze")):
            self.signal(_signal.SIGCONT)
            return
        with contextlib.suppress(FileNotFoundError):
            write(self._f("cgroup.freeze"), "0")

    def _empty(self) -> bool:
        return self._events().get("populated", 0) == 0

    def kill(self) -> bool:
        if not os.path.exists(self._f("cgroup.kill")):
            return freeze_kill_loop(lambda: self._freeze(0.5), self.thaw, self.pids, KILL_WAIT_S)
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            if self._empty():
                return True
            try:
                write(self._f("cgroup.kill"), "1")  # the kernel kills forks in flight too
            except FileNotFoundError:
                return True
            left = deadline - time.monotonic()
            if wait_until(self._empty, max(0.0, min(0.5, left))):
                return True
            if time.monotonic() >= deadline:
                return False

    def usage(self) -> CgroupUsage:
        cpu = keyed(read_opt(self._f("cpu.stat")))
        current = int(read_opt(self._f("memory.current")) or 0)
        peak_text = read_opt(self._f("memory.peak"))
        self._peak_seen = max(self._peak_seen, current)
        return CgroupUsage(
            cpu_user_s=cpu.get("user_usec", 0) / 1e6,
            cpu_system_s=cpu.get("system_usec", 0) / 1e6,
            memory_peak_bytes=int(peak_text) if peak_text else self._peak_seen,
            memory_current_bytes=current,
        )

    def oom_killed(self) -> bool:
        return keyed(read_opt(self._f("memory.events"))).get("oom_kill", 0) > 0

    def remove(self) -> None:
        rmdir_tree(self.path)

    def describe(self) -> dict[str, object]:
        return {
            "kind": "v2",
            "name": self.name,
            "path": self.path,
            "cpus": list(self.cpus),
            "memory_max": read_opt(self._f("memory.max")),
            "memory_swap_max": read_opt(self._f("memory.swap.max")),
            "cpu_max": read_opt(self._f("cpu.max")),
            "pids_max": read_opt(self._f("pids.max")),
        }


class V2Backend:
    """Job cgroups under `<parent>/<namespace>` of a cgroup2 mount (see module docstring)."""

    kind = "v2"

    def __init__(
        self,
        mount: str,
        parent: str,
        namespace: str,
        own: str | None = None,
        want: tuple[str, ...] = WANT,
    ) -> None:
        """`parent` and `own` (this process's cgroup) are absolute directories under `mount`."""
        check_name(namespace, "namespace")
        if not os.path.isdir(parent):
            raise CgroupError(f"cgroup v2 parent {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise CgroupError(f"cgroup v2 parent {parent} is not writable (not delegated?)")
        self.mount = mount.rstrip("/") or "/"
        self.parent = parent.rstrip("/") or "/"
        self.namespace = namespace
        self.ns = os.path.join(self.parent, namespace)
        self.agent: str | None = None
        self.notes: list[str] = []
        self.enforced = self._setup(own, want)

    # -- setup

    def _setup(self, own: str | None, want: tuple[str, ...]) -> frozenset[str]:
        offered = read_opt(os.path.join(self.parent, "cgroup.controllers")) or ""
        wanted = [c for c in want if c in offered.split()]
        busy = self._enable(self.parent, wanted)
        is_own = own is not None and os.path.realpath(own) == os.path.realpath(self.parent)
        if busy and is_own:  # never at the real root (exempt); a container's root, yes
            self._move_to_agent()
            busy = self._enable(self.parent, busy)
        if busy:
            self.notes.append(
                f"{', '.join(busy)} not enabled: {self.parent} holds processes (EBUSY)"
            )
        try:
            os.mkdir(self.ns)
        except FileExistsError:
            pass
        except OSError as e:
            raise CgroupError(f"cannot create {self.ns}: {e.strerror}") from e
        offered_ns = (read_opt(os.path.join(self.ns, "cgroup.controllers")) or "").split()
        self._enable(self.ns, [c for c in wanted if c in offered_ns])
        on = (read_opt(os.path.join(self.ns, "cgroup.subtree_control")) or "").split()
        return frozenset(c for c in on if c in want)

    def _enable(self, dir_: str, controllers: list[str]) -> list[str]:
        """Enable each controller for dir_'s children; returns those refused with EBUSY."""
        have = (read_opt(os.path.join(dir_, "cgroup.subtree_control")) or "").split()
        busy: list[str] = []
        for c in controllers:
            if c in have:
                continue
            try:
                write(os.path.join(dir_, "cgroup.subtree_control"), "+" + c)
            except OSError as e:
                if e.errno == errno.EBUSY:
                    busy.append(c)
                else:
                    self.notes.append(f"{c} not enabled in {dir_}: {e.strerror}")
        return busy

    def _move_to_agent(self) -> None:
        """Move every process of the parent (this worker's own cgroup) into a leaf beside the
        namespace, so the parent may hand controllers to its children."""
        agent = os.path.join(self.parent, self.namespace + "-agent")
        with contextlib.suppress(FileExistsError):
            os.mkdir(agent)
        for pid in (read_opt(os.path.join(self.parent, "cgroup.procs")) or "").split():
            try:
                write(os.path.join(agent, "cgroup.procs"), pid)
            except ProcessLookupError:
                pass
            except OSError as e:
                self.notes.append(f"could not move pid {pid} to {agent}: {e.strerror}")
        self.agent = agent

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.ns, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _choose_cores(self, name: str, want: int) -> tuple[int, ...]:
        avail = parse_cpus(read_opt(os.path.join(self.ns, "cpuset.cpus.effective")))
        given: set[int] = set()
        for entry in os.scandir(self.ns):
            if entry.is_dir() and entry.name != name:  # a job given cores has cpuset.cpus set
                given.update(parse_cpus(read_opt(os.path.join(entry.path, "cpuset.cpus"))))
        free = [c for c in avail if c not in given]
        return tuple(free[:want]) if len(free) >= want else ()

    # -- the contract

    def create(self, name: str, limits: Limits) -> V2JobCgroup:
        check_name(name)
        check_limits(limits)
        old = self.open(name)
        if old is not None:
            old.kill()
            old.remove()
        path = os.path.join(self.ns, name)
        try:
            with self._locked():
                os.mkdir(path)
                try:
                    cores = self._apply(name, path, limits)
                except BaseException:
                    with contextlib.suppress(CgroupError):
                        rmdir_tree(path)
                    raise
        except OSError as e:
            raise CgroupError(f"cannot set up cgroup {path}: {e}") from e
        return V2JobCgroup(name, path, cores)

    def _apply(self, name: str, path: str, limits: Limits) -> tuple[int, ...]:
        on = self.enforced
        if limits.devices_deny:  # before any task joins: the other GPUs (devbpf.py)
            devbpf.attach(path, limits.devices_deny)
        if limits.memory_bytes is not None and "memory" in on:
            write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
            for f, v in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if os.path.exists(os.path.join(path, f)):
                    write(os.path.join(path, f), v)
        if limits.pids is not None and "pids" in on:
            write(os.path.join(path, "pids.max"), str(limits.pids))
        cores: tuple[int, ...] = ()
        if limits.cpus is not None:
            if "cpuset" in on:
                cores = self._choose_cores(name, limits.cpus)
            if cores:
                write(os.path.join(path, "cpuset.cpus"), format_cpus(cores))
            elif "cpu" in on:
                write(
                    os.path.join(path, "cpu.max"), f"{limits.cpus * CPU_PERIOD_US} {CPU_PERIOD_US}"
                )
        return cores

    def open(self, name: str, leader_pid: int | None = None) -> V2JobCgroup | None:
        check_name(name)
        path = os.path.join(self.ns, name)
        if not os.path.isdir(path):
            return None
        return V2JobCgroup(name, path, parse_cpus(read_opt(os.path.join(path, "cpuset.cpus"))))

    def existing(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.ns) if e.is_dir())
        except FileNotFoundError:
            return []

    def describe(self) -> dict[str, object]:
        cores = parse_cpus(read_opt(os.path.join(self.ns, "cpuset.cpus.effective")))
        on = self.enforced
        return {
            "kind": "v2",
            "enforces": {
                "memory": "memory" in on,
                "swap": os.path.exists(os.path.join(self.ns, "memory.swap.max")),
                "cpu": "cpu" in on,
                "cpuset": "cpuset" in on,
                "pids": "pids" in on,
                "freezer": os.path.exists(os.path.join(self.ns, "cgroup.freeze")),
            },
            "parent": self.parent,
            "namespace": self.namespace,
            "paths": [self.ns],
            "agent": self.agent,
            "notes": list(self.notes),
            "cores": list(cores or range(os.cpu_count() or 1)),
        }
