"""cgroup v1: one job directory in each of the memory, cpu, cpuacct, cpuset, freezer and pids
hierarchies that exist (a combined mount such as cpu,cpuacct holds one directory for both).

Layout: `<hierarchy mount>/<parent>/<namespace>/<name>`. Promised:
- memory: memory.limit_in_bytes and memory.memsw.limit_in_bytes (when the kernel has swap
  accounting) hold the same value, so swap does not extend the limit;
- CPU: a cpuset of `cpus` cores no sibling job of the namespace holds (lowest first) when enough
  are free, else cpu.cfs_quota_us = cpus x cpu.cfs_period_us over all cores. A job given a
  cpuset is marked with the xattr `trusted.xce.cpuset` on its cpuset directory (on kernels
  without cgroupfs xattrs, any sibling whose cpuset is narrower than the namespace's counts);
- the freezer stops every task at once; kill() freezes, SIGKILLs all, thaws, until empty.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal as _signal
from collections.abc import Iterator

from xce.worker.cgroups import devices
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
    read,
    read_opt,
    rmdir_tree,
    send,
    signal_frozen,
    wait_until,
    write,
)

CONTROLLERS = ("memory", "cpu", "cpuacct", "cpuset", "freezer", "pids")
CPUSET_MARK = "trusted.xce.cpuset"
FREEZE_WAIT_S = 2.0
KILL_WAIT_S = 5.0
# which hierarchy lists the job's tasks, best first (the freezer is the one kill relies on)
TRACKING_ORDER = ("freezer", "pids", "memory", "cpuacct", "cpu", "cpuset")


class V1JobCgroup:
    """A job's directories, one per v1 hierarchy (see the module docstring)."""

    def __init__(self, name: str, dirs: dict[str, str], cpus: tuple[int, ...] = ()) -> None:
        self.name = name
        self.cpus = cpus
        self.dirs = dict(dirs)  # controller -> directory (combined mounts share one)
        self._unique = sorted(set(self.dirs.values()))
        # precomputed so enter() in the forked child only makes os calls
        self._procs_files = [os.path.join(d, "cgroup.procs") for d in self._unique]
        self._track = next((self.dirs[c] for c in TRACKING_ORDER if c in self.dirs), "")

    def _file(self, controller: str, name: str) -> str | None:
        d = self.dirs.get(controller)
        return os.path.join(d, name) if d else None

    def enter(self) -> None:
        for procs in self._procs_files:
            join(procs)

    def set_leader(self, pid: int) -> None:
        pass

    def pids(self) -> list[int]:
        return procs_of(self._track) if self._track else []

    def signal(self, sig: int) -> None:
        send(self.pids(), sig)

    def signal_all(self, sig: int) -> None:
        signal_frozen(self._freeze, self.thaw, self.pids, sig)

    def _freezer_state(self) -> str:
        f = self._file("freezer", "freezer.state")
        return (read_opt(f) if f else None) or ""

    def _freeze(self, timeout: float) -> bool:
        f = self._file("freezer", "freezer.state")
        if f is None:  # no freezer hierarchy: SIGSTOP each task, racy against forks
            self.signal(_signal.SIGSTOP)
            return True
        try:
            write(f, "FROZEN")
        except FileNotFoundError:
            return True  # the cgroup is gone: nothing left to freeze
        return wait_until(lambda: self._freezer_state() in ("FROZEN", ""), timeout)

    def freeze(self) -> bool:
        return self._freeze(FREEZE_WAIT_S)

    def thaw(self) -> None:
        f = self._file("freezer", "freezer.state")
        if f is None:
            self.signal(_signal.SIGCONT)
            return
        with contextlib.suppress(FileNotFoundError):
            write(f, "THAWED")

    def kill(self) -> bool:
        if "freezer" not in self.dirs:  # nothing to freeze with: SIGKILL rounds until empty
            return freeze_kill_loop(_no_freeze, _no_thaw, self.pids, KILL_WAIT_S)
        return freeze_kill_loop(lambda: self._freeze(0.5), self.thaw, self.pids, KILL_WAIT_S)

    def usage(self) -> CgroupUsage:
        stat = self._file("cpuacct", "cpuacct.stat")
        ticks = keyed(read_opt(stat) if stat else None)
        hz = os.sysconf("SC_CLK_TCK")
        peak = self._file("memory", "memory.max_usage_in_bytes")
        cur = self._file("memory", "memory.usage_in_bytes")
        return CgroupUsage(
            cpu_user_s=ticks.get("user", 0) / hz,
            cpu_system_s=ticks.get("system", 0) / hz,
            memory_peak_bytes=int((read_opt(peak) if peak else None) or 0),
            memory_current_bytes=int((read_opt(cur) if cur else None) or 0),
        )

    def oom_killed(self) -> bool:
        f = self._file("memory", "memory.oom_control")
        return keyed(read_opt(f) if f else None).get("oom_kill", 0) > 0

    def remove(self) -> None:
        for d in self._unique:
            rmdir_tree(d)

    def describe(self) -> dict[str, object]:
        def num(controller: str, name: str) -> int | None:
            f = self._file(controller, name)
            text = read_opt(f) if f else None
            return int(text) if text and text.lstrip("-").isdigit() else None

        quota = num("cpu", "cpu.cfs_quota_us")
        pids_max = self._file("pids", "pids.max")
        return {
            "kind": "v1",
            "name": self.name,
            "paths": dict(self.dirs),
            "cpus": list(self.cpus),
            "memory_limit_bytes": num("memory", "memory.limit_in_bytes"),
            "memsw_limit_bytes": num("memory", "memory.memsw.limit_in_bytes"),
            "cpu_quota_us": quota if quota is not None and quota >= 0 else None,
            "cpu_period_us": num("cpu", "cpu.cfs_period_us"),
            "pids_max": (read_opt(pids_max) if pids_max else None),
        }


class V1Backend:
    """Job cgroups under `<parent>/<namespace>` in every v1 hierarchy given."""

    kind = "v1"

    def __init__(
        self, parents: dict[str, str], namespace: str, devices_parent: str | None = None
    ) -> None:
        """`parents`: controller -> absolute parent directory (it must exist);
        `devices_parent`: the devices hierarchy's, used only for jobs with denied devices."""
        check_name(namespace, "namespace")
        self.namespace = namespace
        self.parents = {c: p for c, p in parents.items() if c in CONTROLLERS}
        if not self.parents:
            raise CgroupError("no cgroup v1 hierarchy among " + ", ".join(CONTROLLERS))
        for c, p in self.parents.items():
            if not os.path.isdir(p):
                raise CgroupError(f"cgroup v1 {c} parent {p} does not exist")
        self.ns = {c: os.path.join(p, namespace) for c, p in self.parents.items()}
        # made on the first job that needs it (devices.make), never joined otherwise
        self.devices_ns = os.path.join(devices_parent, namespace) if devices_parent else None
        for c in self.ns:
            self._mkdir_level(c, self.ns[c])

    # -- setup

    def _mkdir_level(self, controller: str, path: str) -> None:
        """mkdir one level; a new cpuset level copies cpus and mems from its parent."""
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as e:
            raise CgroupError(f"cannot create {path}: {e.strerror}") from e
        if controller == "cpuset":
            parent = os.path.dirname(path)
            for f in ("cpuset.mems", "cpuset.cpus"):  # mems first: both needed before tasks
                if not read_opt(os.path.join(path, f)):
                    write(os.path.join(path, f), read(os.path.join(parent, f)))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise core choice (threads of the worker, or two processes on one namespace)."""
        fd = os.open(next(iter(self.ns.values())), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _given_cores(self, exclude: str) -> set[int]:
        """Cores held by sibling job cgroups that were given a cpuset."""
        ns = self.ns["cpuset"]
        ns_cores = set(parse_cpus(read_opt(os.path.join(ns, "cpuset.cpus"))))
        given: set[int] = set()
        for entry in os.scandir(ns):
            if not entry.is_dir() or entry.name == exclude:
                continue
            cores = set(parse_cpus(read_opt(os.path.join(entry.path, "cpuset.cpus"))))
            if _marked(entry.path, cores < ns_cores):
                given |= cores
        return given

    def _choose_cores(self, name: str, want: int) -> tuple[int, ...]:
        ns = self.ns["cpuset"]
        avail = parse_cpus(
            read_opt(os.path.join(ns, "cpuset.effective_cpus"))
            or read_opt(os.path.join(ns, "cpuset.cpus"))
        )
        given = self._given_cores(exclude=name)
        free = [c for c in avail if c not in given]
        return tuple(free[:want]) if len(free) >= want else ()

    # -- the contract

    def create(self, name: str, limits: Limits) -> V1JobCgroup:
        check_name(name)
        check_limits(limits)
        old = self.open(name)
        if old is not None:
            old.kill()
            old.remove()
        dirs = {c: os.path.join(ns, name) for c, ns in self.ns.items()}
        try:
            with self._locked():
                made: list[str] = []
                try:
                    for c in CONTROLLERS:
                        if c in dirs and dirs[c] not in made:
                            self._mkdir_level(c, dirs[c])
                            made.append(dirs[c])
                    cores = self._apply(name, dirs, limits)
                    if limits.devices_deny:
                        if self.devices_ns is None:
                            raise CgroupError(
                                "the job has GPUs to fence off but no cgroup "
                                "v1 devices hierarchy is mounted"
                            )
                        dirs[devices.HIERARCHY] = devices.make(
                            self.devices_ns, name, limits.devices_deny
                        )
                        made.append(dirs[devices.HIERARCHY])
                except BaseException:
                    for d in made:
                        with contextlib.suppress(CgroupError):
                            rmdir_tree(d)
                    raise
        except OSError as e:
            raise CgroupError(f"cannot set up cgroup {name}: {e}") from e
        return V1JobCgroup(name, dirs, cores)

    def _apply(self, name: str, dirs: dict[str, str], limits: Limits) -> tuple[int, ...]:
        """Write the limits; returns the cores of the cpuset given (or ())."""
        if limits.memory_bytes is not None and "memory" in dirs:
            mem = dirs["memory"]
            write(os.path.join(mem, "memory.limit_in_bytes"), str(limits.memory_bytes))
            memsw = os.path.join(mem, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):  # only with swap accounting; must be set after limit
                write(memsw, str(limits.memory_bytes))
        if limits.pids is not None and "pids" in dirs:
            write(os.path.join(dirs["pids"], "pids.max"), str(limits.pids))
        cores: tuple[int, ...] = ()
        if limits.cpus is not None:
            if "cpuset" in dirs:
                cores = self._choose_cores(name, limits.cpus)
            if cores:
                write(os.path.join(dirs["cpuset"], "cpuset.cpus"), format_cpus(cores))
                _mark(dirs["cpuset"])
            elif "cpu" in dirs:
                cpu = dirs["cpu"]
                period = int(read(os.path.join(cpu, "cpu.cfs_period_us")))
                write(os.path.join(cpu, "cpu.cfs_quota_us"), str(limits.cpus * period))
        return cores

    def open(self, name: str, leader_pid: int | None = None) -> V1JobCgroup | None:
        check_name(name)
        dirs = {c: os.path.join(ns, name) for c, ns in self.ns.items()}
        if self.devices_ns is not None:
            dirs[devices.HIERARCHY] = os.path.join(self.devices_ns, name)
        dirs = {c: d for c, d in dirs.items() if os.path.isdir(d)}
        if not dirs:
            return None
        cores: tuple[int, ...] = ()
        if "cpuset" in dirs:
            ns_cores = set(parse_cpus(read_opt(os.path.join(self.ns["cpuset"], "cpuset.cpus"))))
            mine = parse_cpus(read_opt(os.path.join(dirs["cpuset"], "cpuset.cpus")))
            if _marked(dirs["cpuset"], set(mine) < ns_cores):
                cores = mine
        return V1JobCgroup(name, dirs, cores)

    def existing(self) -> list[str]:
        names: set[str] = set()
        for ns in set(self.ns.values()) | ({self.devices_ns} if self.devices_ns else set()):
            with contextlib.suppress(FileNotFoundError):
                names.update(e.name for e in os.scandir(ns) if e.is_dir())
        return sorted(names)

    def describe(self) -> dict[str, object]:
        cpuset = self.ns.get("cpuset")
        cores = (
            parse_cpus(read_opt(os.path.join(cpuset, "cpuset.effective_cpus")))
            if cpuset
            else tuple(range(os.cpu_count() or 1))
        )
        mem = self.parents.get("memory")
        return {
            "kind": "v1",
            "enforces": {
                "memory": "memory" in self.ns,
                "swap": bool(
                    mem and os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes"))
                ),
                "cpu": "cpu" in self.ns,
                "cpuset": "cpuset" in self.ns,
                "pids": "pids" in self.ns,
                "freezer": "freezer" in self.ns,
            },
            "parent": dict(self.parents),
            "namespace": self.namespace,
            "paths": sorted(set(self.ns.values())),
            "cores": list(cores),
        }


def _no_freeze() -> bool:
    return True


def _no_thaw() -> None:
    pass


def _mark(cpuset_dir: str) -> None:
    """Mark a job's cpuset as given (exclusive) when cgroupfs takes xattrs; else the
    narrower-than-the-namespace rule of _marked() applies."""
    with contextlib.suppress(OSError):
        os.setxattr(cpuset_dir, CPUSET_MARK, b"1")


def _marked(cpuset_dir: str, narrower: bool) -> bool:
    """Whether a job cgroup holds its cpuset exclusively (see _mark)."""
    try:
        os.getxattr(cpuset_dir, CPUSET_MARK)
        return True
    except OSError as e:
        if e.errno == errno.ENODATA:
            return False
        return narrower  # no xattrs on this kernel: a narrower cpuset means it was given
