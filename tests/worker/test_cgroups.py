"""The cgroup adapter against the real kernel (as root): v1 (this machine's main backend), v2 on
the controller-less cgroup2 mount, and the "none" fallback.

Each test makes its own namespace (`xcetest-<pid>-<n>`) and the `made` fixture kills and
removes every job cgroup and namespace directory it made, even when the test fails. Jobs are
real processes started the way the keeper will: fork, enter() in the child, setsid, exec.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from xce.worker.cgroups import (
    CgroupBackend,
    CgroupError,
    JobCgroup,
    Limits,
    NoneBackend,
    V1Backend,
    V2Backend,
    detect,
)
from xce.worker.cgroups.base import format_cpus, parse_cpus, read_opt, wait_until
from xce.worker.cgroups.detect import _under, own_cgroups, read_mounts, v1_hierarchies

MiB = 1 << 20
PY = sys.executable
_counter = itertools.count()

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroup tests need root")


def _v1_usable() -> bool:
    hier = v1_hierarchies(read_mounts())
    return all(c in hier and not hier[c].read_only for c in ("memory", "freezer"))


def _v2_mount() -> str | None:
    return next((m.point for m in read_mounts() if m.fstype == "cgroup2"), None)


needs_v1 = pytest.mark.skipif(not _v1_usable(), reason="no writable cgroup v1 memory+freezer")
needs_v2 = pytest.mark.skipif(_v2_mount() is None, reason="no cgroup2 mount")

# a busy loop in two processes; writes argv[1] once both run
BUSY2 = "import os,sys\nos.fork()\nopen(sys.argv[1] + str(os.getpid()), 'w').close()\nwhile 1: pass"
BUSY1 = "import sys\nopen(sys.argv[1], 'w').close()\nwhile 1: pass"


class Made:
    """Backends, jobs and processes a test made, all cleaned up at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.backends: list[CgroupBackend] = []
        self.jobs: list[JobCgroup] = []
        self.children: list[int] = []

    def namespace(self) -> str:
        return f"xcetest-{os.getpid()}-{next(_counter)}"

    def backend(self, mode: str, namespace: str = "", **kw: str) -> CgroupBackend:
        b = detect(mode, namespace=namespace or self.namespace(), **kw)
        self.backends.append(b)
        return b

    def create(self, b: CgroupBackend, name: str, limits: Limits) -> JobCgroup:
        cg = b.create(name, limits)
        self.jobs.append(cg)
        return cg

    def spawn(self, cg: JobCgroup, *argv: str) -> int:
        """Start a job process the keeper's way: fork, enter(), setsid(), exec."""
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                cg.enter()
                os.setsid()
                os.execvp(argv[0], list(argv))
            except BaseException:
                pass
            os._exit(127)
        self.children.append(pid)
        cg.set_leader(pid)
        return pid

    def py(self, cg: JobCgroup, code: str, *args: str) -> int:
        return self.spawn(cg, PY, "-c", code, *args)

    def cleanup(self) -> None:
        for cg in self.jobs:
            with contextlib.suppress(Exception):
                cg.kill()
        for b in self.backends:
            for name in b.existing():
                left = b.open(name)
                if left is not None:
                    with contextlib.suppress(Exception):
                        left.kill()
                        left.remove()
        for cg in self.jobs:
            with contextlib.suppress(Exception):
                cg.remove()
        for b in self.backends:
            for ns in ns_dirs(b):
                with contextlib.suppress(OSError):
                    os.rmdir(ns)
        for pid in self.children:
            reap(pid, 2.0)


def ns_dirs(b: CgroupBackend) -> list[str]:
    """The namespace directories of a backend (none for "none")."""
    return cast(list[str], b.describe().get("paths") or [])


def enforces(b: CgroupBackend, what: str) -> bool:
    return bool(cast(dict[str, bool], b.describe()["enforces"])[what])


def cores_of(b: CgroupBackend) -> tuple[int, ...]:
    return tuple(cast(list[int], b.describe()["cores"]))


def reap(pid: int, timeout: float) -> int | None:
    """waitpid with a timeout; the raw status, or None if it still runs."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X")


def cpu(cg: JobCgroup) -> float:
    u = cg.usage()
    return u.cpu_user_s + u.cpu_system_s


@pytest.fixture(scope="module", autouse=True)
def _sweep_stale_namespaces() -> None:
    """Remove what an earlier run of this file left when it was killed mid-test (its
    namespaces are `xcetest-<pid>-<n>` for a pid that no longer runs)."""
    if os.geteuid() != 0:
        return
    points = {m.point for m in read_mounts()}
    stale: set[str] = set()
    for point in points:
        for root, dirs, _files in os.walk(point):
            for d in dirs:
                parts = d.split("-")
                if (
                    len(parts) == 3
                    and parts[0] == "xcetest"
                    and parts[1].isdigit()
                    and not Path(f"/proc/{parts[1]}").exists()
                ):
                    stale.add(d)
            if root.count("/") - point.count("/") >= 2:
                dirs.clear()  # namespaces sit at most a few levels down
    for ns in stale:
        for mode in ("v1", "v2"):
            with contextlib.suppress(CgroupError, ValueError):
                b = detect(mode, namespace=ns)
                for name in b.existing():
                    left = b.open(name)
                    if left is not None:
                        left.kill()
                        left.remove()
                for d in ns_dirs(b):
                    with contextlib.suppress(OSError):
                        os.rmdir(d)


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Made]:
    m = Made(tmp_path)
    try:
        yield m
    finally:
        m.cleanup()


# --------------------------------------------------------------------------------------- v1


@needs_v1
def test_v1_memory_limit_oom_kills_the_job_and_reports_it(made: Made) -> None:
    b = made.backend("v1")
    cg = made.create(b, "hog", Limits(memory_bytes=64 * MiB))
    d = cg.describe()
    assert d["memory_limit_bytes"] == 64 * MiB
    if enforces(b, "swap"):
        assert d["memsw_limit_bytes"] == 64 * MiB  # swap does not extend the limit
    assert not cg.oom_killed()
    pid = made.py(cg, "x = b'x' * (256 << 20)")
    status = reap(pid, 20)
    assert status is not None and os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL
    assert cg.oom_killed()
    peak = cg.usage().memory_peak_bytes
    assert 32 * MiB <= peak <= 64 * MiB


@needs_v1
def test_v1_peak_memory_counts_shared_pages_once(made: Made) -> None:
    """Four processes sharing 48 MiB after fork: RSS summed is ~4x, the cgroup's peak is not."""
    b = made.backend("v1")
    cg = made.create(b, "shared", Limits(memory_bytes=1024 * MiB))
    ready = made.tmp / "ready"
    code = (
        "import os,sys,time\nb = b'x' * (48 << 20)\nos.fork()\nos.fork()\n"
        "open(sys.argv[1] + str(os.getpid()), 'w').close()\ntime.sleep(60)"
    )
    made.py(cg, code, str(ready))
    wait_for(lambda: len(list(made.tmp.glob("ready*"))) == 4)
    rss = 0
    for pid in cg.pids():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
    assert len(cg.pids()) == 4
    peak = cg.usage().memory_peak_bytes
    assert rss > 4 * 48 * MiB
    assert 48 * MiB < peak < 2 * 48 * MiB, (peak, rss)
    assert cg.usage().memory_current_bytes <= peak
    assert cg.kill()


@needs_v1
def test_v1_one_cpu_gets_a_core_and_two_busy_processes_share_it(made: Made) -> None:
    b = made.backend("v1")
    cg = made.create(b, "cpu1", Limits(cpus=1))
    cores = cores_of(b)
    assert cg.cpus == cores[:1]  # lowest free core
    assert cg.describe()["cpu_quota_us"] is None
    ready = made.tmp / "busy"
    made.py(cg, BUSY2, str(ready))
    wait_for(lambda: len(list(made.tmp.glob("busy*"))) == 2)
    c0, t0 = cpu(cg), time.monotonic()
    time.sleep(2.0)
    ratio = (cpu(cg) - c0) / (time.monotonic() - t0)
    assert 0.2 < ratio < 1.5, ratio


@needs_v1
def test_v1_no_free_cores_falls_back_to_a_quota(made: Made) -> None:
    b = made.backend("v1")
    cores = cores_of(b)
    whole = made.create(b, "all", Limits(cpus=len(cores)))
    assert whole.cpus == cores
    q = made.create(b, "quota", Limits(cpus=1))
    assert q.cpus == ()
    d = q.describe()
    assert d["cpu_quota_us"] == d["cpu_period_us"]  # 1 CPU of quota over all cores
    if len(cores) > 1:  # the quota must hold two busy processes to ~1 CPU
        made.py(q, BUSY2, str(made.tmp / "busy"))
        wait_for(lambda: len(list(made.tmp.glob("busy*"))) == 2)
        c0, t0 = cpu(q), time.monotonic()
        time.sleep(1.5)
        ratio = (cpu(q) - c0) / (time.monotonic() - t0)
        assert 0.2 < ratio < 1.5, ratio
    whole.remove()
    assert made.create(b, "again", Limits(cpus=1)).cpus == cores[:1]  # freed cores are reused


@needs_v1
def test_v1_freeze_stops_every_task_and_thaw_resumes(made: Made) -> None:
    b = made.backend("v1")
    cg = made.create(b, "frz", Limits())
    made.py(cg, BUSY2, str(made.tmp / "busy"))
    wait_for(lambda: len(list(made.tmp.glob("busy*"))) == 2)
    assert cg.freeze()
    c0 = cpu(cg)
    time.sleep(0.5)
    assert cpu(cg) - c0 < 0.03
    cg.thaw()
    time.sleep(0.5)
    assert cpu(cg) - c0 > 0.1
    assert cg.freeze()  # a suspended job is killed too (requeue of a suspended job)
    assert cg.kill()
    assert cg.pids() == []


ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + '.tmp', 'w') as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[1] + '.tmp', sys.argv[1])
        time.sleep(100)
    os._exit(0)
time.sleep(100)
"""


@needs_v1
def test_v1_kill_reaches_a_setsid_double_fork(made: Made) -> None:
    b = made.backend("v1")
    cg = made.create(b, "esc", Limits())
    pidfile = made.tmp / "escaped"
    leader = made.py(cg, ESCAPE, str(pidfile))
    wait_for(pidfile.exists)
    escaped = int(pidfile.read_text())
    assert escaped in cg.pids() and leader in cg.pids()
    t0 = time.monotonic()
    assert cg.kill()
    took = time.monotonic() - t0
    assert cg.pids() == []
    assert took < 2.0, took
    assert gone(escaped)
    status = reap(leader, 5)
    assert status is not None and os.WTERMSIG(status) == signal.SIGKILL
    cg.remove()
    assert b.existing() == []


BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


@needs_v1
def test_v1_pids_limit_holds_a_fork_bomb_and_kill_empties_it(made: Made) -> None:
    b = made.backend("v1")
    if not enforces(b, "pids"):
        pytest.skip("no v1 pids hierarchy")
    cg = made.create(b, "bomb", Limits(pids=16))
    made.py(cg, BOMB)
    pids_dir = cast(dict[str, str], cg.describe()["paths"])["pids"]
    wait_for(lambda: len(cg.pids()) >= 16)
    time.sleep(0.5)
    assert len(cg.pids()) <= 16
    assert int(Path(pids_dir, "pids.current").read_text()) <= 16
    assert int(Path(pids_dir, "pids.events").read_text().split()[1]) > 0  # forks refused
    assert cg.kill()
    assert cg.pids() == []


CHAIN = """
import os, time
while True:  # the newest task forks the next one, then every older one just waits
    time.sleep(0.001)
    if os.fork():
        while True:
            time.sleep(60)
"""


@needs_v1
def test_v1_sigterm_reaches_every_task_of_a_forking_chain_at_once(made: Made) -> None:
    """The polite end of a kill reaches every task of a job that keeps forking: SIGTERM is
    sent while the cgroup is frozen (like Slurm's proctrack/cgroup), so no task forked
    between reading the list and signalling it is missed. (The kernel's window for that
    miss is microseconds wide: this test fails when a task is left out, e.g. only the
    leader signalled, not reliably on the window itself.)"""
    b = made.backend("v1")
    if not enforces(b, "freezer"):
        pytest.skip("no v1 freezer hierarchy")
    for attempt in range(2):
        cg = made.create(b, f"term{attempt}", Limits(pids=2000))
        made.py(cg, CHAIN)
        wait_for(lambda cg=cg: len(cg.pids()) >= 50)
        cg.signal_all(signal.SIGTERM)
        ended = wait_until(lambda cg=cg: not cg.pids(), 2.0)
        left = len(cg.pids())
        cg.kill()
        assert ended, f"try {attempt}: {left} tasks outlived SIGTERM"


@needs_v1
def test_v1_leftovers_are_listed_reopened_replaced_and_removed(made: Made) -> None:
    ns = made.namespace()
    first = made.backend("v1", namespace=ns)
    old = made.create(first, "job-1.0", Limits(cpus=1, memory_bytes=128 * MiB))
    made.create(first, "job-2.0", Limits())
    sleeper = made.spawn(old, "sleep", "100")
    wait_for(lambda: sleeper in old.pids())

    again = made.backend("v1", namespace=ns)  # a restarted worker
    assert again.existing() == ["job-1.0", "job-2.0"]
    other = made.backend("v1")  # another worker's namespace sees none of them
    assert other.existing() == []
    reopened = again.open("job-1.0")
    assert reopened is not None
    assert reopened.pids() == [sleeper]
    assert reopened.cpus == old.cpus
    assert reopened.describe()["memory_limit_bytes"] == 128 * MiB
    assert again.open("job-9.0") is None

    fresh = made.create(again, "job-1.0", Limits())  # replaces the leftover: kills its job
    assert fresh.pids() == []
    assert gone(sleeper)
    assert fresh.describe()["memory_limit_bytes"] != 128 * MiB
    assert fresh.cpus == ()

    for name in again.existing():
        cg = again.open(name)
        assert cg is not None
        cg.kill()
        cg.remove()
        cg.remove()  # already gone is fine
    assert again.existing() == []
    for ns_dir in ns_dirs(again):
        assert not [e for e in os.scandir(ns_dir) if e.is_dir()]  # no job directory left


@needs_v1
def test_v1_a_combined_mount_holds_one_directory_for_its_controllers(made: Made) -> None:
    """cpu and cpuacct on one mount (cpu,cpuacct): one job directory serves both."""
    hier = v1_hierarchies(read_mounts())
    shared, freezer = hier["cpu"].point, hier["freezer"].point
    ns = made.namespace()
    b = V1Backend({"cpu": shared, "cpuacct": shared, "freezer": freezer}, ns)
    made.backends.append(b)
    cg = made.create(b, "j", Limits(cpus=1))
    assert cg.describe()["cpu_quota_us"] == cg.describe()["cpu_period_us"]  # no cpuset here
    assert len(set(cast(dict[str, str], cg.describe()["paths"]).values())) == 2
    made.spawn(cg, "sleep", "100")
    wait_for(lambda: len(cg.pids()) == 1)
    assert cg.kill()
    cg.remove()
    assert b.existing() == [] and not os.path.exists(os.path.join(shared, ns, "j"))


DEVICES_V1 = "/sys/fs/cgroup/devices"


@needs_v1
@pytest.mark.skipif(not os.access(DEVICES_V1, os.W_OK), reason="no writable v1 devices")
def test_v1_devices_deny_is_enforced_and_no_devices_directory_is_left(made: Made) -> None:
    """The job's devices directory denies its entries to every task, goes with remove(),
    and a create that fails half-way through the deny lines leaves no directory behind."""
    freezer = v1_hierarchies(read_mounts())["freezer"].point
    ns = made.namespace()
    b = V1Backend({"freezer": freezer}, ns, devices_parent=DEVICES_V1)
    made.backends.append(b)

    def children() -> list[str]:
        return [e.name for e in os.scandir(os.path.join(DEVICES_V1, ns)) if e.is_dir()]

    try:
        cg = made.create(b, "j", Limits(devices_deny=("c 1:7 rwm",)))  # /dev/full
        out = made.tmp / "opened"
        made.py(
            cg,
            "import sys\n"
            "for n in ('/dev/zero', '/dev/full'):\n"
            "    try:\n        open(n, 'rb').close(); r = 'open'\n"
            "    except OSError: r = 'denied'\n"
            "    open(sys.argv[1], 'a').write(f'{n} {r}\\n')\n",
            str(out),
        )
        wait_for(lambda: out.exists() and out.read_text().count("\n") == 2)
        assert out.read_text() == "/dev/zero open\n/dev/full denied\n"
        cg.kill()
        cg.remove()
        assert b.existing() == [] and children() == []
        # the kernel refuses the second line (major out of range): nothing stays
        with pytest.raises(CgroupError):
            b.create("k", Limits(devices_deny=("c 1:7 rwm", "c 4294967296:0 rwm")))
        assert children() == [] and b.existing() == []
    finally:
        with contextlib.suppress(OSError):
            for left in children():
                os.rmdir(os.path.join(DEVICES_V1, ns, left))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(DEVICES_V1, ns))


# --------------------------------------------------------------------------------------- v2


@needs_v2
def test_v2_on_the_unified_mount_contains_freezes_and_kills(made: Made) -> None:
    b = made.backend("v2")
    assert isinstance(b, V2Backend)
    offered = (read_opt(os.path.join(b.parent, "cgroup.controllers")) or "").split()
    for c in ("memory", "cpu", "pids"):
        assert enforces(b, c) == (c in offered)  # none offered on this machine's mount
    cg = made.create(b, "v2job", Limits(memory_bytes=64 * MiB, cpus=1, pids=64))
    pidfile = made.tmp / "escaped"
    leader = made.py(cg, ESCAPE, str(pidfile))
    wait_for(pidfile.exists)
    escaped = int(pidfile.read_text())
    assert {leader, escaped} <= set(cg.pids())
    assert cg.freeze()
    assert "frozen 1" in Path(str(cg.describe()["path"]), "cgroup.events").read_text()
    cg.thaw()

    busy = made.create(b, "busy", Limits())
    made.py(busy, BUSY1, str(made.tmp / "busy"))
    wait_for((made.tmp / "busy").exists)
    time.sleep(0.2)
    assert busy.freeze()
    c0 = cpu(busy)
    assert c0 > 0  # cpu.stat accounts without the cpu controller
    time.sleep(0.4)
    assert cpu(busy) - c0 < 0.03
    busy.thaw()
    time.sleep(0.3)
    assert cpu(busy) - c0 > 0.05

    assert cg.kill() and busy.kill()
    assert cg.pids() == [] and gone(escaped)
    assert sorted(b.existing()) == ["busy", "v2job"]
    reopened = b.open("v2job")
    assert reopened is not None and reopened.pids() == []
    cg.remove()
    busy.remove()
    assert b.existing() == []
    assert not cg.oom_killed()


@needs_v2
def test_v2_device_program_denies_the_entries_to_every_task(made: Made) -> None:
    """cgroup v2 has no devices.deny: the job's cgroup gets an eBPF device program that
    denies the other GPUs' nodes (here /dev/full, c 1:7) to the job and its children,
    root included, before any task joins; other nodes stay open."""
    b = made.backend("v2")
    cg = made.create(b, "gpujob", Limits(devices_deny=("c 1:7 rwm",)))
    out = made.tmp / "opened"
    made.py(
        cg,
        "import os, sys\n"
        "if os.fork() == 0:\n    os.setsid()\n"  # a child that left the session too
        "for n in ('/dev/zero', '/dev/full', '/dev/null'):\n"
        "    try:\n        open(n, 'rb').close(); r = 'open'\n"
        "    except OSError: r = 'denied'\n"
        "    open(sys.argv[1] + str(os.getpid()), 'a').write(f'{n} {r}\\n')\n",
        str(out),
    )
    wait_for(
        lambda: (
            len([p for p in made.tmp.iterdir() if p.name.startswith("opened")]) == 2
            and all(
                p.read_text().count("\n") == 3
                for p in made.tmp.iterdir()
                if p.name.startswith("opened")
            )
        )
    )
    for p in made.tmp.iterdir():
        if p.name.startswith("opened"):
            assert p.read_text() == "/dev/zero open\n/dev/full denied\n/dev/null open\n"
    cg.kill()
    cg.remove()
    assert b.existing() == []


def _v2_offers(*controllers: str) -> str:
    """Why the v2 limits cannot be tested here, or "" when they can."""
    mount = _v2_mount()
    if mount is None:
        return "no cgroup2 mount"
    offered = (read_opt(os.path.join(mount, "cgroup.controllers")) or "").split()
    missing = [c for c in controllers if c not in offered]
    if not missing:
        return ""
    bound = [
        line.split()[0]
        for line in Path("/proc/cgroups").read_text().splitlines()[1:]
        if line.split()[0] in missing and line.split()[1] != "0"
    ]
    return f"the cgroup2 mount offers no {', '.join(missing)} controller" + (
        f": {', '.join(bound)} bound to this host's v1 hierarchies" if bound else ""
    )


@pytest.mark.skipif(
    bool(_v2_offers("memory", "pids", "cpuset")),
    reason=_v2_offers("memory", "pids", "cpuset") or "-",
)
def test_v2_limits_memory_pids_and_cores(made: Made) -> None:
    """On a host with cgroup v2 controllers (most production sites): --mem is memory.max with
    no swap beyond it and an OOM kill is reported, pids.max holds a fork bomb, a 1-slot job
    gets one core of the cpuset."""
    b = made.backend("v2")
    hog = made.create(b, "hog", Limits(memory_bytes=64 * MiB))
    d = hog.describe()
    assert d["memory_max"] == str(64 * MiB) and d["memory_swap_max"] in ("0", None)
    assert d["pids_max"] in ("max", None)
    status = reap(made.py(hog, "x = b'x' * (256 << 20)"), 20)
    assert status is not None and os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL and hog.oom_killed()
    assert 32 * MiB <= hog.usage().memory_peak_bytes <= 64 * MiB

    bomb = made.create(b, "bomb", Limits(pids=16))
    made.py(bomb, BOMB)
    wait_for(lambda: len(bomb.pids()) >= 16)
    time.sleep(0.5)
    assert len(bomb.pids()) <= 16
    assert bomb.kill() and bomb.pids() == []

    one = made.create(b, "cpu1", Limits(cpus=1))
    assert len(one.cpus) == 1
    made.py(one, BUSY2, str(made.tmp / "busy"))
    wait_for(lambda: len(list(made.tmp.glob("busy*"))) == 2)
    c0, t0 = cpu(one), time.monotonic()
    time.sleep(2.0)
    assert (cpu(one) - c0) / (time.monotonic() - t0) < 1.5
    assert one.kill()


@needs_v2
def test_v2_moves_its_own_cgroup_to_an_agent_leaf_when_the_parent_is_busy(made: Made) -> None:
    """The Delegate=yes case: the worker sits in the parent, so enabling a controller for the
    parent's children is refused (EBUSY) until the worker moves to `<namespace>-agent`. Uses
    hugetlb (the one controller this machine's cgroup2 mount has) as the controller wanted."""
    mount = _v2_mount()
    assert mount is not None
    root_ctl = Path(mount, "cgroup.subtree_control")
    if "hugetlb" not in Path(mount, "cgroup.controllers").read_text().split():
        pytest.skip("the cgroup2 mount offers no spare controller (hugetlb) to test with")
    added = "hugetlb" not in root_ctl.read_text().split()
    own_before = Path("/proc/self/cgroup").read_text()
    v2 = next(m for m in read_mounts() if m.fstype == "cgroup2")
    back = Path(_under(v2, "", own_cgroups().get("")), "cgroup.procs")
    home = Path(mount, made.namespace())
    home.mkdir()
    ns = made.namespace()
    try:
        if added:
            root_ctl.write_text("+hugetlb")
        Path(home, "cgroup.procs").write_text(str(os.getpid()))  # the "worker" is in parent
        # a busy parent that is not this process's cgroup: nothing is moved, and it says so
        other = V2Backend(
            mount, str(home), ns + "x", own=str(home / "elsewhere"), want=("hugetlb",)
        )
        assert other.agent is None and other.enforced == frozenset()
        assert "EBUSY" in " ".join(other.notes)
        assert other.describe()["notes"] == other.notes
        os.rmdir(other.ns)
        # its own cgroup: the worker moves to <namespace>-agent and the controller is enabled
        b = V2Backend(mount, str(home), ns, own=str(home), want=("hugetlb",))
        assert b.agent == str(home / f"{ns}-agent")
        assert str(os.getpid()) in Path(b.agent, "cgroup.procs").read_text().split()
        assert b.enforced == frozenset({"hugetlb"}), b.notes
        cg = b.create("j", Limits())
        made.jobs.append(cg)
        assert "hugetlb" in Path(home, ns, "j", "cgroup.controllers").read_text().split()
        cg.remove()
    finally:
        back.write_text(str(os.getpid()))  # back where we were
        for d in sorted((p for p in home.rglob("*") if p.is_dir()), key=lambda p: -len(str(p))):
            with contextlib.suppress(OSError):
                d.rmdir()
        if added:
            with contextlib.suppress(OSError):
                Path(home, "cgroup.subtree_control").write_text("-hugetlb")
        with contextlib.suppress(OSError):
            home.rmdir()
        if added:
            with contextlib.suppress(OSError):
                root_ctl.write_text("-hugetlb")
    assert Path("/proc/self/cgroup").read_text() == own_before
    assert not home.exists()


# ------------------------------------------------------------------------------------- none


def test_none_applies_rlimits_in_the_child_and_kills_the_session(made: Made) -> None:
    b = made.backend("none")
    assert isinstance(b, NoneBackend)
    assert not any(enforces(b, k) for k in ("memory", "swap", "cpu", "cpuset", "pids", "freezer"))
    cg = made.create(b, "small", Limits(memory_bytes=256 * MiB))
    code = (
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])\n"
        "try:\n    x = bytearray(512 << 20)\nexcept MemoryError:\n    raise SystemExit(3)"
    )
    pid = made.py(cg, code)
    status = reap(pid, 20)
    assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3

    cg2 = made.create(b, "session", Limits())
    leader = made.spawn(cg2, "sh", "-c", "sleep 100 & sleep 100 & wait")
    wait_for(lambda: len(cg2.pids()) == 3)
    assert leader in cg2.pids()
    assert b.open("session", leader) is not None and b.open("x", None) is None
    assert cg2.freeze()
    cg2.thaw()
    assert cg2.usage().memory_current_bytes > 0
    assert cg2.kill()
    assert cg2.pids() == []
    assert reap(leader, 5) is not None
    assert not cg2.oom_killed() and b.existing() == []


# ----------------------------------------------------------------------------------- detect


def _fake_proc(tmp: Path, mountinfo: str, cgroup: str) -> str:
    (tmp / "self").mkdir(parents=True, exist_ok=True)
    (tmp / "self" / "mountinfo").write_text(mountinfo)
    (tmp / "self" / "cgroup").write_text(cgroup)
    return str(tmp)


def test_detect_modes_and_refusals(made: Made, tmp_path: Path) -> None:
    v2_real = (
        "memory"
        in (
            read_opt(os.path.join(_v2_mount() or "/nonexistent", "cgroup.controllers")) or ""
        ).split()
    )
    auto = made.backend("auto")
    if v2_real:
        assert auto.kind == "v2"
    elif _v1_usable():
        assert auto.kind == "v1"  # this development machine
    assert made.backend("none").kind == "none"
    if _v1_usable():
        assert made.backend("v1").kind == "v1"
        assert isinstance(made.backends[-1], V1Backend)
    if _v2_mount():
        assert made.backend("v2").kind == "v2"

    with pytest.raises(ValueError, match="cgroup mode"):
        detect("v3")
    for bad in ("../x", "a/b", "", ".", "..", "x y", "a\n"):
        with pytest.raises(ValueError):
            auto.create(bad, Limits())
        with pytest.raises(ValueError):
            detect("none", namespace=bad)
    with pytest.raises(ValueError):
        auto.create("ok", Limits(memory_bytes=-1))

    # forced modes that cannot work say why
    empty = _fake_proc(tmp_path / "p1", "", "0::/\n")
    with pytest.raises(CgroupError, match="no cgroup2 mount"):
        detect("v2", proc=empty)
    with pytest.raises(CgroupError, match="no cgroup v1"):
        detect("v1", proc=empty)
    assert detect("auto", proc=empty).kind == "none"
    missing = _fake_proc(
        tmp_path / "p2",
        "30 25 0:26 / /nonexistent/cg/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "31 25 0:27 / /nonexistent/cg2 ro,nosuid - cgroup2 cgroup2 rw\n",
        "3:cpu,cpuacct:/a\n0::/\n",
    )
    with pytest.raises(CgroupError, match="does not exist"):
        detect("v1", proc=missing)
    with pytest.raises(CgroupError, match="read-only"):
        detect("v2", proc=missing)
    with pytest.raises(CgroupError, match=r"'\.\.'"):
        detect("v1", parent="../etc", proc=missing)


def test_mount_table_parsing_handles_combined_and_subtree_mounts(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "32 25 0:28 /docker/abc /c/mem\\040x rw - cgroup cgroup rw,memory\n"
        "33 25 0:29 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
        "34 25 0:30 / /u rw - cgroup2 cgroup2 rw\n",
        "5:memory:/docker/abc/job\n3:cpu,cpuacct:/a/b\n1:name=systemd:/x\n0::/w\n",
    )
    mounts = read_mounts(proc)
    hier = v1_hierarchies(mounts)
    assert hier["cpu"] is hier["cpuacct"]
    assert hier["cpu"].point == "/sys/fs/cgroup/cpu,cpuacct"
    assert set(hier) == {"cpu", "cpuacct", "memory"}
    own = own_cgroups(proc)
    assert own == {
        "memory": "/docker/abc/job",
        "cpu": "/a/b",
        "cpuacct": "/a/b",
        "name=systemd": "/x",
        "": "/w",
    }
    assert _under(hier["memory"], "", own["memory"]) == "/c/mem x/job"
    assert _under(hier["cpu"], "", own["cpu"]) == "/sys/fs/cgroup/cpu,cpuacct/a/b"
    assert _under(hier["cpu"], "/site/xce", None) == "/sys/fs/cgroup/cpu,cpuacct/site/xce"
    with pytest.raises(CgroupError, match="outside the mount"):
        _under(hier["memory"], "", "/other")
    assert parse_cpus("0-2,5,7-8") == (0, 1, 2, 5, 7, 8)
    assert format_cpus((8, 0, 1, 2, 5, 7)) == "0-2,5,7-8"
