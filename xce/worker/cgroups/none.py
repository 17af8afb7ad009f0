"""The "none" backend: no cgroup, for hosts where none is usable. Best effort, and weaker:

- limits are rlimits set in the child by enter(): RLIMIT_AS = memory_bytes (virtual address
  space per process, not the job's memory: a job of many processes can use more, and programs
  that reserve much address space can fail below the limit) and RLIMIT_NPROC = pids (it counts
  every process of the job's *user* on the host, not of this job, and root ignores it);
  `cpus` is not enforced;
- the job is the session whose id is the leader's pid (the keeper's child calls os.setsid()
  right after enter()). A process that calls setsid() itself leaves the job: pids(), signal(),
  freeze() and kill() cannot see or stop it. Only a cgroup backend contains a job;
- freeze() is SIGSTOP to each process (a job can catch SIGCONT, and a fork in flight may run);
- usage() sums /proc figures of the live processes (exited children count through their
  parent's cutime/cstime once reaped), peak memory is the highest sum of RSS seen by usage();
- oom_killed() is always False: there is no OOM accounting without a memory cgroup.
"""

from __future__ import annotations

import os
import resource
import signal as _signal
import time

from xce.worker.cgroups.base import CgroupUsage, Limits, check_limits, check_name, send, wait_until

FREEZE_WAIT_S = 2.0
KILL_WAIT_S = 5.0


def _stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2 :].decode("ascii", "replace").split()


def session_members(sid: int) -> dict[int, list[str]]:
    """Live (not zombie) processes of session `sid`, with their stat fields."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields and len(fields) > 21 and fields[3] == str(sid) and fields[0] not in "ZX":
            out[int(entry)] = fields
    return out


class NoneJobCgroup:
    """A job tracked as the session of its leader, limited by rlimits (see module docstring)."""

    def __init__(self, name: str, limits: Limits, leader: int | None = None) -> None:
        self.name = name
        self.cpus: tuple[int, ...] = ()
        self.limits = limits
        self.leader = leader
        self._cpu_seen = (0.0, 0.0)
        self._peak_seen = 0

    def enter(self) -> None:
        for res, value in (
            (resource.RLIMIT_AS, self.limits.memory_bytes),
            (resource.RLIMIT_NPROC, self.limits.pids),
        ):
            if value is None:
                continue
            _soft, hard = resource.getrlimit(res)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (cap, cap))  # hard too: the job cannot raise it again

    def set_leader(self, pid: int) -> None:
        self.leader = pid

    def _members(self) -> dict[int, list[str]]:
        return session_members(self.leader) if self.leader else {}

    def pids(self) -> list[int]:
        return sorted(self._members())

    def signal(self, sig: int) -> None:
        send(self.pids(), sig)

    def signal_all(self, sig: int) -> None:
        self.signal(sig)  # nothing to freeze the session with: one pass, racy against forks

    def freeze(self) -> bool:
        def all_stopped() -> bool:
            running = [p for p, f in self._members().items() if f[0] not in "Tt"]
            send(running, _signal.SIGSTOP)
            return not running

        return wait_until(all_stopped, FREEZE_WAIT_S, step=0.01)

    def thaw(self) -> None:
        self.signal(_signal.SIGCONT)

    def kill(self) -> bool:
        deadline = time.monotonic() + KILL_WAIT_S
        while self.pids():
            self.signal(_signal.SIGKILL)
            left = deadline - time.monotonic()
            if wait_until(lambda: not self.pids(), max(0.0, min(0.25, left))):
                break
            if time.monotonic() >= deadline:
                return False
        return True

    def usage(self) -> CgroupUsage:
        hz = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        user = system = 0.0
        rss = 0
        for f in self._members().values():
            user += (int(f[11]) + int(f[13])) / hz
            system += (int(f[12]) + int(f[14])) / hz
            rss += int(f[21]) * page
        # processes vanish from /proc when they end: never report less than already seen
        self._cpu_seen = (max(self._cpu_seen[0], user), max(self._cpu_seen[1], system))
        self._peak_seen = max(self._peak_seen, rss)
        return CgroupUsage(self._cpu_seen[0], self._cpu_seen[1], self._peak_seen, rss)

    def oom_killed(self) -> bool:
        return False

    def remove(self) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return {
            "kind": "none",
            "name": self.name,
            "session": self.leader,
            "rlimit_as": self.limits.memory_bytes,
            "rlimit_nproc": self.limits.pids,
        }


class NoneBackend:
    """No containment: rlimits and session tracking only (see module docstring)."""

    kind = "none"

    def __init__(self, reason: str = "") -> None:
        self.reason = reason  # why no cgroup backend was chosen, for describe()

    def create(self, name: str, limits: Limits) -> NoneJobCgroup:
        check_name(name)
        check_limits(limits)
        return NoneJobCgroup(name, limits)

    def open(self, name: str, leader_pid: int | None = None) -> NoneJobCgroup | None:
        """The job whose session is `leader_pid`, if any of it is still alive."""
        check_name(name)
        if not leader_pid or not session_members(leader_pid):
            return None
        return NoneJobCgroup(name, Limits(), leader_pid)

    def existing(self) -> list[str]:
        return []  # nothing on the host records job names without cgroups

    def describe(self) -> dict[str, object]:
        return {
            "kind": "none",
            "enforces": {
                "memory": False,
                "swap": False,
                "cpu": False,
                "cpuset": False,
                "pids": False,
                "freezer": False,
            },
            "rlimits": ["RLIMIT_AS (per process)", "RLIMIT_NPROC (per user)"],
            "reason": self.reason,
            "parent": None,
            "cores": list(range(os.cpu_count() or 1)),
        }
