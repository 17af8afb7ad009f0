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
  `setgroups(user's groups from os.getgrouplist)`, `setfsgid(gid)`, `setfsuid(uid)`;
* each is verified: setfsuid(-1)/setfsgid(-1) return the current ids, getgroups() the group
  list, and /proc/thread-self/status must show the fsuid, fsgid and groups, and a CapEff
  without CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER (the kernel drops
  them when fsuid leaves 0, unless SECURE_NO_SETUID_FIXUP is set: then we refuse);
* the syscall checks run again after `fn` (the process must never call os.setgroups/setuid/
  setgid itself, whose glibc broadcast would reset this thread); a mismatch raises
  `CredentialsError` instead of returning a result obtained with unknown credentials;
* on an architecture without known syscall numbers (only x86_64 and aarch64 are known), or
  when any step fails, `CredentialsError` is raised and `fn` never runs unprotected.

When the worker is not root, when `creds` is None, or when the job user is the worker's own
user, `fn` simply runs in a fresh thread with the worker's credentials.
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

# (setgroups, setfsuid, setfsgid) of the 64-bit ABIs (asm/unistd_64.h, asm-generic/unistd.h)
_SYSCALLS: dict[str, tuple[int, int, int]] = {
    "x86_64": (116, 122, 123),
    "aarch64": (159, 151, 152),
}
# CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: must be gone from CapEff
_FS_CAPS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3)
_NO_CHANGE = 0xFFFFFFFF  # (uid_t)-1: setfsuid/setfsgid change nothing and return the current id


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
        fields = dict(line.split(":", 1) for line in f.read().decode().splitlines()
                      if ":" in line)
    uids, gids = fields["Uid"].split(), fields["Gid"].split()
    groups = tuple(sorted(int(g) for g in fields["Groups"].split()))
    return int(uids[3]), int(gids[3]), groups, int(fields["CapEff"].strip(), 16)


def _verify(libc: ctypes.CDLL, numbers: tuple[int, int, int], creds: Credentials,
            proc: bool) -> None:
    """The thread's fsuid, fsgid and groups are `creds` (syscalls; and /proc when `proc`)."""
    _, setfsuid, setfsgid = numbers
    want_groups = tuple(sorted(set(creds.groups)))
    fsuid = _call(libc, setfsuid, ctypes.c_long(_NO_CHANGE))
    fsgid = _call(libc, setfsgid, ctypes.c_long(_NO_CHANGE))
    groups = tuple(sorted(set(os.getgroups())))
    if (fsuid, fsgid, groups) != (creds.uid, creds.gid, want_groups):
        raise CredentialsError(f"thread has fsuid {fsuid}, fsgid {fsgid}, groups {groups}; "
                               f"wanted {creds.uid}, {creds.gid}, {want_groups}")
    if not proc:
        return
    p_uid, p_gid, p_groups, cap_eff = thread_credentials()
    if (p_uid, p_gid, tuple(sorted(set(p_groups)))) != (creds.uid, creds.gid, want_groups):
        raise CredentialsError(f"/proc shows fsuid {p_uid}, fsgid {p_gid}, groups {p_groups}")
    if cap_eff & _FS_CAPS:
        raise CredentialsError(f"file capabilities still effective (CapEff {cap_eff:x})")


def _become(creds: Credentials) -> Callable[[], None]:
    """Give the calling thread the user's file-system identity; returns the re-check."""
    machine = os.uname().machine
    numbers = _SYSCALLS.get(machine)
    if numbers is None:
        raise CredentialsError(f"no per-thread credentials on {machine}: refusing to run "
                               "the operation as root")
    setgroups, setfsuid, setfsgid = numbers
    libc = _libc()
    groups = sorted(set(creds.groups))
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    _call(libc, setgroups, ctypes.c_long(len(groups)), array)
    _call(libc, setfsgid, ctypes.c_long(creds.gid))
    _call(libc, setfsuid, ctypes.c_long(creds.uid))
    _verify(libc, numbers, creds, proc=True)  # ~100 us: once, before anything runs
    return lambda: _verify(libc, numbers, creds, proc=False)


def _needs_switch(creds: Credentials | None) -> bool:
    return creds is not None and os.geteuid() == 0 and creds.uid != 0


def _body(creds: Credentials | None, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    if creds is None or not _needs_switch(creds):
        return fn(*args)
    recheck = _become(creds)
    result = fn(*args)
    recheck()
    return result


def run_as_user(creds: Credentials | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a fresh thread with `creds` (see the module docstring); blocks."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, _body(creds, fn, args)))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=target, name="xce-as-user", daemon=True)
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


async def as_user(creds: Credentials | None, fn: Callable[..., T], *args: Any,
                  discard: Callable[[T], None] | None = None) -> T:
    """`fn(*args)` in a fresh thread with `creds`, awaited without blocking the loop.

    The thread cannot be stopped: if the awaiting task is cancelled, `fn` still finishes and
    its result is passed to `discard` (e.g. `JobFiles.close`) so descriptors do not leak.
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
            outcome: tuple[bool, Any] = (True, _body(creds, fn, args))
        except BaseException as exc:
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody will take the result
            if outcome[0] and discard is not None:
                discard(outcome[1])

    threading.Thread(target=target, name="xce-as-user", daemon=True).start()
    return await future
