"""cgroup v2's device fence: an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE.

cgroup v2 has no devices.deny file; the kernel asks the programs attached to a task's cgroup
(and its ancestors) at open(2) and mknod(2) of a device node, as systemd's DevicePolicy and
runc do. The program here denies the `c MAJ:MIN rwm` entries of `Limits.devices_deny` (the
same entries as v1's devices.deny, xce/worker/cgroups/devices.py) and allows everything
else. It is attached with BPF_F_ALLOW_MULTI, so programs of the ancestors (systemd's) still
run too, and it lives as long as the job's cgroup: a worker restart keeps it; removing the
cgroup frees it. Plain ctypes over bpf(2): no library, no compiler.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterable

from xce.worker.cgroups.base import CgroupError

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_BPF_PROG_LOAD = 5
_BPF_PROG_ATTACH = 8
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6
_BPF_F_ALLOW_MULTI = 2
_ATTR_SIZE = 128
_TYPES = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR
_ACCESS = {"m": 1, "r": 2, "w": 4}  # BPF_DEVCG_ACC_MKNOD, _READ, _WRITE

_LIBC = ctypes.CDLL(None, use_errno=True)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(entries: Iterable[str]) -> bytes:
    """The bytecode: deny (return 0) an access matching an entry, else allow (return 1).
    ctx is struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor}, access_type
    holding the device type in its low 16 bits and the access bits in the high 16."""
    rules: list[tuple[int, int, int, int]] = []
    for entry in entries:
        kind, numbers, access = entry.split(" ")
        major, minor = (int(n) for n in numbers.split(":"))
        mask = 0
        for a in access:
            mask |= _ACCESS[a]
        rules.append((_TYPES[kind], major, minor, mask))
    out = [
        _insn(0x61, 2, 1, 4),  # r2 = ctx->major
        _insn(0x61, 3, 1, 8),  # r3 = ctx->minor
        _insn(0x61, 4, 1, 0),  # r4 = ctx->access_type
        _insn(0xBF, 5, 4),  # r5 = r4
        _insn(0x77, 5, 0, 0, 16),  # r5 >>= 16: the access bits
        _insn(0x54, 4, 0, 0, 0xFFFF),  # w4 &= 0xffff: the device type
    ]
    deny_at = len(out) + 4 * len(rules) + 2
    for dev_type, major, minor, mask in rules:
        here = len(out)
        out += [
            _insn(0x55, 4, 0, 3, dev_type),  # if r4 != type: next rule
            _insn(0x55, 2, 0, 2, major),  # if r2 != major: next rule
            _insn(0x55, 3, 0, 1, minor),  # if r3 != minor: next rule
            _insn(0x45, 5, 0, deny_at - (here + 4), mask),  # if r5 & mask: deny
        ]
    out += [_insn(0xB7, 0, 0, 0, 1), _insn(0x95)]  # allow: r0 = 1; exit
    if rules:  # the verifier refuses unreachable code
        out += [_insn(0xB7, 0, 0, 0, 0), _insn(0x95)]  # deny: r0 = 0; exit
    return b"".join(out)


def _bpf(cmd: int, attr: bytes) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise CgroupError(
            f"no bpf(2) number known for {platform.machine()}: cannot fence GPUs under cgroup v2"
        )
    buf = ctypes.create_string_buffer(attr.ljust(_ATTR_SIZE, b"\0"), _ATTR_SIZE)
    result = _LIBC.syscall(number, cmd, buf, _ATTR_SIZE)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def attach(cgroup_dir: str, entries: Iterable[str], flags: int = _BPF_F_ALLOW_MULTI) -> None:
    """Deny `entries` to every task of `cgroup_dir` (before any task joins it)."""
    code = ctypes.create_string_buffer(program(entries))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = struct.pack(
        "<IIQQIIQ",
        _BPF_PROG_TYPE_CGROUP_DEVICE,
        len(code.raw) // 8,
        ctypes.addressof(code),
        ctypes.addressof(license_),
        1,
        len(log),
        ctypes.addressof(log),
    )
    try:
        prog = _bpf(_BPF_PROG_LOAD, attr)
    except OSError as exc:
        detail = log.value.decode("utf-8", "replace").strip()[-300:]
        raise CgroupError(
            f"cannot load the cgroup v2 device program: {exc.strerror}"
            + (f" ({detail})" if detail else "")
        ) from None
    try:
        target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(_BPF_PROG_ATTACH, struct.pack("<IIII", target, prog, _BPF_CGROUP_DEVICE, flags))
        finally:
            os.close(target)
    except OSError as exc:
        raise CgroupError(
            f"cannot attach the device program to {cgroup_dir}: {exc.strerror}"
        ) from None
    finally:
        os.close(prog)  # the attachment holds the program for the cgroup's life
