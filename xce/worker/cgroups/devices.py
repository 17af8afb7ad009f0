"""The cgroup v1 devices controller: a job cannot open the GPUs it was not granted.

Only jobs of a host with GPUs configured get a directory in the devices hierarchy (the
worker fills `Limits.devices_deny` only then), so ordinary launches neither create nor join
one. The job's directory inherits the parent's allow list (root's `a *:* rwm`) and gets a
`devices.deny` line per other GPU's device node, by its major:minor: the check is the
kernel's at open(2), whatever path or copy of the node the job uses. Like Slurm's
task/cgroup `ConstrainDevices=yes`. cgroup v2 has no devices files: the same entries go
into an eBPF device program attached to the job's cgroup (xce/worker/cgroups/devbpf.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable

from xce.worker.cgroups.base import CgroupError, write

HIERARCHY = "devices"
ENTRY_KINDS = {"c", "b"}


# NVIDIA's GPU nodes: /dev/nvidiaN is character device 195:N (the driver's fixed major,
# NV_MAJOR_DEVICE_NUMBER; nvidia-modprobe makes the node with minor N).
NVIDIA_NODE = re.compile(r"/dev/nvidia([0-9]{1,3})")
NVIDIA_MAJOR = 195


def deny_entries(paths: Iterable[str]) -> tuple[str, ...]:
    """`c MAJOR:MINOR rwm` for each device node in `paths`. One that exists but is not a
    device node is an error (a GPU configured by a wrong path must not be silently open).
    A node that does not exist yet is not "nothing to open": NVIDIA's setuid
    nvidia-modprobe makes a missing /dev/nvidiaN when any CUDA program asks for it, so a
    job started before the node existed could open it later. /dev/nvidiaN is denied by its
    fixed numbers (c 195:N) whether or not it exists; any other missing node is an error
    (fail closed: the job does not start rather than run with a GPU left open)."""
    out: list[str] = []
    for path in paths:
        why = untrusted(path)
        if why is not None:
            raise CgroupError(
                f"GPU device path {path} is not trusted: {why} (a user could "
                "swap the node and leave the GPU open; check gpu_device_path)"
            )
        try:
            st = os.stat(path)
        except FileNotFoundError:
            nvidia = NVIDIA_NODE.fullmatch(path)
            if nvidia is None or int(nvidia.group(1)) > 255:
                raise CgroupError(
                    f"GPU device node {path} does not exist: its device "
                    "numbers are unknown, so it cannot be denied to the job "
                    "(check gpu_device_path)"
                ) from None
            entry = f"c {NVIDIA_MAJOR}:{int(nvidia.group(1))} rwm"
            if entry not in out:
                out.append(entry)
            continue
        except OSError as exc:
            raise CgroupError(f"GPU device node {path}: {exc.strerror}") from None
        if stat.S_ISCHR(st.st_mode):
            kind = "c"
        elif stat.S_ISBLK(st.st_mode):
            kind = "b"
        else:
            raise CgroupError(f"GPU device path {path} is not a device node")
        entry = f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} rwm"
        if entry not in out:
            out.append(entry)
    return tuple(out)


def untrusted(path: str) -> str | None:
    """Why someone other than root could change what `path` names, or None. The worker
    reads a node's numbers through the path; a symlink or a directory on the way that a
    user controls would let a job point the path at another node (/dev/null) and so have
    the real GPU left open. Every component, as written and as resolved, must be root's;
    a directory others may write must be sticky (like /tmp), and what lies in it must
    already exist and be root's."""
    for chain in (os.path.abspath(path), os.path.realpath(path)):
        prefix = "/"
        parts = [p for p in chain.split("/") if p]
        for i, part in enumerate(["", *parts]):
            prefix = os.path.join(prefix, part) if part else "/"
            try:
                st = os.lstat(prefix)
            except FileNotFoundError:
                return None  # the rest does not exist (deny_entries decides about that)
            except OSError as exc:
                return f"{prefix}: {exc.strerror}"
            if st.st_uid != 0:
                return f"{prefix} belongs to uid {st.st_uid}"
            if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and i < len(parts):
                if not st.st_mode & stat.S_ISVTX:
                    return f"{prefix} is writable by others"
                if not os.path.lexists(os.path.join(prefix, parts[i])):
                    return (
                        f"{os.path.join(prefix, parts[i])} is missing in a directory "
                        "others may write"
                    )
    return None


def check_entries(entries: Iterable[str]) -> None:
    for entry in entries:
        kind, _, rest = entry.partition(" ")
        numbers, _, access = rest.partition(" ")
        major, _, minor = numbers.partition(":")
        if (
            kind not in ENTRY_KINDS
            or not (major.isdigit() and minor.isdigit())
            or not access
            or set(access) - set("rwm")
        ):
            raise ValueError(f"Limits.devices_deny entry {entry!r} is not 'c MAJ:MIN rwm'")


def make(ns: str, name: str, entries: Iterable[str]) -> str:
    """The job's devices directory under `ns` with `entries` denied; returns its path."""
    try:
        os.makedirs(ns, exist_ok=True)
        path = os.path.join(ns, name)
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CgroupError(f"cannot create devices cgroup {name}: {exc.strerror}") from None
    try:
        for entry in entries:
            write(os.path.join(path, "devices.deny"), entry)
    except BaseException as exc:
        # the caller's clean-up knows only directories it was handed: remove this one here,
        # or a half-written devices cgroup outlives the failed launch
        with contextlib.suppress(OSError):
            os.rmdir(path)
        if isinstance(exc, OSError):
            raise CgroupError(
                f"cannot deny {entry!r} in devices cgroup {name}: {exc.strerror}"
            ) from None
        raise
    return path
