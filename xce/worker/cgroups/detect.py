"""Pick the cgroup backend of this host from /proc/self/mountinfo and /proc/self/cgroup.

"auto" takes v2 when the cgroup2 mount offers the memory controller (a real v2 host) and the
parent is writable, else v1 when the memory and freezer hierarchies are mounted read-write,
else "none". A forced mode that cannot work raises CgroupError saying why. Mount points come
from the mount table (never assumed to be /sys/fs/cgroup); a mount of a subtree (a container
without a cgroup namespace) is handled through mountinfo's root field.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from xce.worker.cgroups.base import CgroupBackend, CgroupError, check_name, read_opt
from xce.worker.cgroups.none import NoneBackend
from xce.worker.cgroups.v1 import CONTROLLERS as V1_CONTROLLERS
from xce.worker.cgroups.v1 import V1Backend
from xce.worker.cgroups.v2 import V2Backend

MODES = ("auto", "v2", "v1", "none")


@dataclass(frozen=True)
class Mount:
    """One cgroup mount: where it is, which cgroup it shows as its top, its options."""

    point: str
    root: str  # the cgroup path (in this process's cgroup namespace) the mount shows at `point`
    fstype: str  # "cgroup" (v1) or "cgroup2"
    options: frozenset[str]  # v1: the controllers of the hierarchy, e.g. {"cpu", "cpuacct"}
    read_only: bool


def _unescape(field: str) -> str:
    """Mount tables write space, tab, newline and backslash as \\ooo octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def read_mounts(proc: str = "/proc") -> list[Mount]:
    """Cgroup mounts of this process, from mountinfo (or the plainer mounts file)."""
    out: list[Mount] = []
    info = read_opt(os.path.join(proc, "self/mountinfo"))
    if info is not None:
        for line in info.splitlines():
            left, sep, right = line.partition(" - ")
            a, b = left.split(), right.split()
            if not sep or len(a) < 6 or len(b) < 3 or b[0] not in ("cgroup", "cgroup2"):
                continue
            out.append(
                Mount(
                    _unescape(a[4]),
                    _unescape(a[3]),
                    b[0],
                    frozenset(b[2].split(",")),
                    "ro" in a[5].split(","),
                )
            )
        return out
    for line in (read_opt(os.path.join(proc, "self/mounts")) or "").splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] in ("cgroup", "cgroup2"):
            opts = frozenset(f[3].split(","))
            out.append(Mount(_unescape(f[1]), "/", f[2], opts, "ro" in opts))
    return out


def own_cgroups(proc: str = "/proc") -> dict[str, str]:
    """This process's cgroup per v1 controller, and under "" its cgroup2 path."""
    out: dict[str, str] = {}
    for line in (read_opt(os.path.join(proc, "self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            out[""] = parts[2]
        for c in parts[1].split(","):
            if c:
                out[c] = parts[2]
    return out


def v1_hierarchies(mounts: list[Mount]) -> dict[str, Mount]:
    """Controller -> its v1 mount (a combined cpu,cpuacct mount serves both)."""
    out: dict[str, Mount] = {}
    for m in mounts:
        if m.fstype == "cgroup":
            for c in V1_CONTROLLERS:
                if c in m.options and c not in out:
                    out[c] = m
    return out


def _under(mount: Mount, parent: str, own: str | None) -> str:
    """Absolute directory of `parent` (relative to the mount), or of this process's cgroup."""
    if parent:
        rel = parent.strip("/")
        if ".." in rel.split("/"):
            raise CgroupError(f"parent {parent!r} must not contain '..'")
        return os.path.join(mount.point, rel) if rel else mount.point
    if own is None:
        return mount.point
    root = mount.root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        raise CgroupError(
            f"this process's cgroup {own} is outside the mount {mount.point} "
            f"(which shows {mount.root}); pass an explicit parent"
        )
    rel = own[len(root) :].strip("/")
    return os.path.join(mount.point, rel) if rel else mount.point


def _v2(mounts: list[Mount], own: dict[str, str], parent: str, namespace: str) -> V2Backend:
    m = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if m is None:
        raise CgroupError("no cgroup2 mount in the mount table")
    if m.read_only:
        raise CgroupError(f"the cgroup2 mount {m.point} is read-only")
    own_dir = _under(m, "", own.get("")) if "" in own else None
    return V2Backend(m.point, _under(m, parent, own.get("")), namespace, own=own_dir)


def _v1(
    mounts: list[Mount], own: dict[str, str], parent: str, namespace: str, require: tuple[str, ...]
) -> V1Backend:
    hier = v1_hierarchies(mounts)
    missing = [c for c in require if c not in hier]
    if missing or not hier:
        raise CgroupError(
            f"no cgroup v1 {'/'.join(missing or V1_CONTROLLERS)} hierarchy in the mount table"
        )
    ro = [c for c, m in hier.items() if m.read_only]
    if ro:
        raise CgroupError(f"cgroup v1 hierarchies mounted read-only: {', '.join(ro)}")
    parents = {c: _under(m, parent, own.get(c)) for c, m in hier.items()}
    absent = [p for p in parents.values() if not os.path.isdir(p)]
    if absent:
        raise CgroupError(f"cgroup v1 parent does not exist: {', '.join(sorted(absent))}")
    unwritable = [p for p in parents.values() if not os.access(p, os.W_OK)]
    if unwritable:
        raise CgroupError(f"cgroup v1 parent not writable: {', '.join(sorted(unwritable))}")
    return V1Backend(parents, namespace, _devices_parent(mounts, own, parent))


def _devices_parent(mounts: list[Mount], own: dict[str, str], parent: str) -> str | None:
    """The v1 devices hierarchy's parent when it is mounted and writable (GPU fencing,
    xce/worker/cgroups/devices.py), else None: never a reason to refuse v1."""
    for m in mounts:
        if m.fstype == "cgroup" and "devices" in m.options and not m.read_only:
            try:
                path = _under(m, parent, own.get("devices"))
            except CgroupError:
                return None
            return path if os.path.isdir(path) and os.access(path, os.W_OK) else None
    return None


def _v2_is_real(mounts: list[Mount]) -> bool:
    """True on a real v2 host: the cgroup2 mount offers the memory controller."""
    m = next((m for m in mounts if m.fstype == "cgroup2"), None)
    text = read_opt(os.path.join(m.point, "cgroup.controllers")) if m else None
    return "memory" in (text or "").split()


def detect(
    mode: str = "auto", parent: str = "", namespace: str = "xce", *, proc: str = "/proc"
) -> CgroupBackend:
    """The backend for `mode` ("auto", "v2", "v1", "none"); see the module docstring.

    `parent`: where the namespace goes, relative to each hierarchy's mount (default: this
    process's own cgroup there). `namespace`: the directory of this worker's job cgroups.
    `proc` is for tests (a fake /proc with self/mountinfo and self/cgroup).
    """
    if mode not in MODES:
        raise ValueError(f"cgroup mode {mode!r}: use one of {', '.join(MODES)}")
    check_name(namespace, "namespace")
    if mode == "none":
        return NoneBackend("configured")
    mounts = read_mounts(proc)
    own = own_cgroups(proc)
    if mode == "v2":
        return _v2(mounts, own, parent, namespace)
    if mode == "v1":
        return _v1(mounts, own, parent, namespace, require=())
    reasons: list[str] = []
    if _v2_is_real(mounts):
        try:
            return _v2(mounts, own, parent, namespace)
        except CgroupError as e:
            reasons.append(f"v2: {e}")
    else:
        reasons.append("v2: no cgroup2 mount offering the memory controller")
    try:
        return _v1(mounts, own, parent, namespace, require=("memory", "freezer"))
    except CgroupError as e:
        reasons.append(f"v1: {e}")
    return NoneBackend("; ".join(reasons))
