"""Run a function in a thread that has the file-system credentials of a job's user.

Why: the worker runs as root and a job is hostile code, so everything the worker does inside a
job's tree must be checked by the kernel as the job's user, not as root. Switching the whole
process (setuid) would drop root for the event loop too; a helper process per operation costs a
fork. Linux keeps credentials per kernel thread, so one short-lived thread can carry the user's
file-system identity while every other thread (the asyncio loop) stays root.

What is promised, for a root worker and a job user other than root:

* each call runs `fn` in a fresh `threading.Thread` (one kernel thread, never reused, which
  exits afterwards, taking its credentials with it);
* before `fn` runs, that thread calls the raw syscalls (through `ctypes`, not glibc's
  wrappers: glibc's setgroups/setuid broadcast to every thread of the process)
  `setgroups(user's groups from os.getgrouplist)`, `setfsgid(gid)`, `setfsuid(uid)`, then
  `capset` with an empty effective set (the kernel already drops CAP_CHOWN, CAP_DAC_*,
  CAP_FOWNER... when fsuid leaves 0, unless SECURE_NO_SETUID_FIXUP is set; emptying it also
  removes CAP_SYS_RESOURCE, so the user's disk quota applies);
* each is verified: setfsuid(-1)/setfsgid(-1) return the current ids, getgroups() the group
  list, capget() an empty effective set, and /proc/thread-self/status must show the same
  fsuid, fsgid, groups and CapEff 0;
* on an architecture without known syscall numbers (only x86_64 and aarch64 are known), or
  when any step fails, `CredentialsError` is raised and `fn` never runs unprotected;
* the syscall checks run again after `fn`; a mismatch raises `CredentialsError` (after
  passing the result to `discard`) instead of returning what unknown credentials produced.

For callers: glibc's setuid/setgid/setgroups (os.setuid, os.setgroups...) called by any thread
of this process while such a thread lives ABORT the process (glibc runs them on every thread;
the capability-less thread fails, and glibc aborts rather than leave threads with different
ids). Switch users only in forked children (subprocess's user=/extra_groups=, fork+setuid),
which is safe. `fn` runs as the user: it must not import anything lazily (Python's own library
may be unreadable to the user, e.g. under /root), nor hand work to another thread. A call
costs one thread start plus ~0.2 ms of switching and checks (~0.3-0.7 ms in all, measured on
an idle 2-core machine): batch operations into one call.

When the worker is not root, when `creds` is None, or when the job user is root or the
worker's own user, `fn` simply runs in a fresh thread with the worker's credentials.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pwd
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# (setgroups, setfsuid, setfsgid, capget, capset) of the 64-bit ABIs (asm/unistd_64.h and
# asm-generic/unistd.h)
_SYSCALLS: dict[str, tuple[int, int, int, int, int]] = {
    "x86_64": (116, 122, 123, 125, 126),
    "aarch64": (159, 151, 152, 90, 91),
}
_NO_CHANGE = 0xFFFFFFFF  # (uid_t)-1: setfsuid/setfsgid change nothing and return the current id
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]  # pid 0: this thread


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class CredentialsError(RuntimeError):
    """The thread could not be given (or lost) the job user's credentials."""


@dataclass(frozen=True)
class Credentials:
    """Whom the kernel checks file operations against: uid, gid and supplementary groups."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str

    @classmethod
    def of(cls, account: pwd.struct_passwd) -> Credentials:
        """The credentials of `account`; groups from os.getgrouplist (which, unlike
        grp.getgrall, also sees directory users when sssd does not enumerate)."""
        groups = os.getgrouplist(account.pw_name, account.pw_gid)
        return cls(account.pw_uid, account.pw_gid, tuple(sorted(set(groups))), account.pw_name)


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _LIBC = libc
    return _LIBC


def _call(libc: ctypes.CDLL, number: int, *args: Any) -> int:
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result == -1:
        err = ctypes.get_errno()
        raise CredentialsError(f"syscall {number} failed: {os.strerror(err)}")
    return result


def thread_credentials() -> tuple[int, int, tuple[int, ...], int]:
    """(fsuid, fsgid, groups, CapEff) of the calling thread, from /proc/thread-self/status."""
    # binary + bytes.decode: no codec lookup, which could need an import the user cannot read
    with open(f"/proc/self/task/{threading.get_native_id()}/status", "rb") as f:
        fields = dict(line.split(":", 1) for line in f.read().decode().splitlines() if ":" in line)
    uids, gids = fields["Uid"].split(), fields["Gid"].split()
    groups = tuple(sorted(int(g) for g in fields["Groups"].split()))
    return int(uids[3]), int(gids[3]), groups, int(fields["CapEff"].strip(), 16)


def _capabilities(libc: ctypes.CDLL, capget: int) -> tuple[_CapHeader, Any]:
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    _call(libc, capget, ctypes.byref(header), data)
    return header, data


def _verify(libc: ctypes.CDLL, numbers: tuple[int, ...], creds: Credentials, proc: bool) -> None:
    """The thread's fsuid, fsgid and groups are `creds` and it has no effective capability
    (syscalls; and /proc/thread-self/status when `proc`)."""
    _, setfsuid, setfsgid, capget, _ = numbers
    want_groups = tuple(sorted(set(creds.groups)))
    fsuid = _call(libc, setfsuid, ctypes.c_long(_NO_CHANGE))
    fsgid = _call(libc, setfsgid, ctypes.c_long(_NO_CHANGE))
    groups = tuple(sorted(set(os.getgroups())))
    _, caps = _capabilities(libc, capget)
    if (fsuid, fsgid, groups) != (creds.uid, creds.gid, want_groups):
        raise CredentialsError(
            f"thread has fsuid {fsuid}, fsgid {fsgid}, groups {groups}; "
            f"wanted {creds.uid}, {creds.gid}, {want_groups}"
        )
    if caps[0].effective or caps[1].effective:
        raise CredentialsError("thread still has effective capabilities")
    if not proc:
        return
    p_uid, p_gid, p_groups, cap_eff = thread_credentials()
    if (p_uid, p_gid, tuple(sorted(set(p_groups)))) != (creds.uid, creds.gid, want_groups):
        raise CredentialsError(f"/proc shows fsuid {p_uid}, fsgid {p_gid}, groups {p_groups}")
    if cap_eff:
        raise CredentialsError(f"/proc shows effective capabilities {cap_eff:x}")


def _become(creds: Credentials) -> Callable[[], None]:
    """Give the calling thread the user's file-system identity and no effective capability;
    returns the re-check to run after the function."""
    machine = os.uname().machine
    numbers = _SYSCALLS.get(machine)
    if numbers is None:
        raise CredentialsError(
            f"no per-thread credentials on {machine}: refusing to run the operation as root"
        )
    setgroups, setfsuid, setfsgid, capget, capset = numbers
    libc = _libc()
    groups = sorted(set(creds.groups))
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    _call(libc, setgroups, ctypes.c_long(len(groups)), array)
    _call(libc, setfsgid, ctypes.c_long(creds.gid))
    _call(libc, setfsuid, ctypes.c_long(creds.uid))
    header, caps = _capabilities(libc, capget)
    caps[0].effective = caps[1].effective = 0  # permitted kept: only this thread, which ends
    _call(libc, capset, ctypes.byref(header), caps)
    _verify(libc, numbers, creds, proc=True)  # ~100 us: once, before anything runs
    return lambda: _verify(libc, numbers, creds, proc=False)


def _needs_switch(creds: Credentials | None) -> bool:
    return creds is not None and os.geteuid() == 0 and creds.uid != 0


def _body(
    creds: Credentials | None,
    fn: Callable[..., T],
    args: tuple[Any, ...],
    discard: Callable[[T], None] | None,
) -> T:
    if creds is None or not _needs_switch(creds):
        return fn(*args)
    recheck = _become(creds)
    result = fn(*args)
    try:
        recheck()
    except BaseException:
        if discard is not None:
            discard(result)
        raise
    return result


def run_as_user(
    creds: Credentials | None,
    fn: Callable[..., T],
    *args: Any,
    discard: Callable[[T], None] | None = None,
) -> T:
    """`fn(*args)` in a fresh thread with `creds` (see the module docstring); blocks."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, _body(creds, fn, args, discard)))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=target, name="xce-as-user", daemon=True)
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


async def as_user(
    creds: Credentials | None,
    fn: Callable[..., T],
    *args: Any,
    discard: Callable[[T], None] | None = None,
) -> T:
    """`fn(*args)` in a fresh thread with `creds`, awaited without blocking the loop.

    The thread cannot be stopped: if the awaiting task is cancelled, `fn` still finishes and
    its result is passed to `discard` (e.g. `JobFiles.close`, `close_outputs`, `os.close`) so
    descriptors do not leak.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.cancelled():
            if ok and discard is not None:
                discard(value)
        elif ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            outcome: tuple[bool, Any] = (True, _body(creds, fn, args, discard))
        except BaseException as exc:
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody will take the result
            if outcome[0] and discard is not None:
                discard(outcome[1])

    threading.Thread(target=target, name="xce-as-user", daemon=True).start()
    return await future
