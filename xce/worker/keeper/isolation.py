"""The isolation every process of a job gets: one code path for all of them.

A job's processes start in three places: the keeper forks the job's leader (its script,
xce/worker/keeper/process.py); the task service forks the tasks of `xce launch` on the job's
first host and, in the job's share, on its other hosts (xce/worker/tasks/service.py). Each of
them calls `enter` between fork and exec with a `Confinement`, so a step one of them takes
cannot be missing from another: the job is hostile code, and each step closes a way out.

`enter` runs, in this order (each step needs the one before it):

1. the job's cgroup, as root (the "none" backend sets the job's rlimits here instead);
2. a session of its own, every signal's default disposition and an empty signal mask (the
   keeper and the worker's event loop ignore or block signals an exec'd job must get back);
3. OOM score 0 (the keeper shields itself from the OOM killer, the worker's unit may too);
4. the job's mount namespace (`NewMounts` or `JoinMounts`): the leader makes it, with a
   fresh tmpfs on /dev/shm and, with `private_tmp`, on /tmp, and hands a descriptor of it to
   its keeper, which holds it for the job's life; a task joins it with setns(2) through a
   descriptor the task service took from that keeper (the job's first host) or from the
   share's own namespace (its other hosts, `hold_new_namespace`). As root and before anything
   of the user's runs: setns needs CAP_SYS_ADMIN, and only the namespace recorded at the
   start is ever joined, never one the job made (a user namespace's mounts could cover
   /etc for a setuid program run as the user);
5. the job's user: supplementary groups, gid, uid, checked;
6. a new session keyring, as the user: a process keeps its parent's otherwise, and the
   worker's holds root's keys (systemd gives every service one) and whatever another job's
   task linked into it;
7. the working directory, entered as the user (a directory the user may not enter is never
   entered by root on their behalf).

Standard library only: the keeper imports this at start, and it runs between fork and exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import socket
from dataclasses import dataclass
from typing import Protocol

from xce.worker.cgroups.base import JobCgroup

# keyctl(2) by architecture (no libc wrapper: libkeyutils is not always installed).
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "ppc64le": 311, "s390x": 280}
_KEYCTL_JOIN_SESSION_KEYRING = 1
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_SLAVE = 0x2, 0x4, 0x4000, 0x80000
# The tag of the one message that carries a namespace descriptor to its holder.
NAMESPACE_TAG = b"mnt-ns"

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_LIBC.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_LIBC.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_LIBC.unshare.argtypes = [ctypes.c_int]


class SetupFailed(Exception):
    """A step of `enter` failed: "<what it was doing>: <why>", for the job's user."""


class Identity(Protocol):
    """Whom the job runs as (xce/worker/attempt/fscreds.py `Credentials` is one)."""

    @property
    def uid(self) -> int: ...

    @property
    def gid(self) -> int: ...

    @property
    def groups(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class User:
    """An `Identity` made from the attempt's spec (the keeper has no account lookups)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str = ""


@dataclass(frozen=True)
class NewMounts:
    """Make the job's mount namespace (its leader; a share's holder)."""

    tmp_bytes: int | None  # the /tmp tmpfs's size: the job's memory limit (None: tmpfs's own)
    private_tmp: bool  # a tmpfs on /tmp too (the worker's `private_tmp`, see `private_tmp_for`)
    hand_over: int | None = None  # a socket to send a descriptor of the namespace on


@dataclass(frozen=True)
class JoinMounts:
    """Join the job's existing mount namespace through a descriptor of it."""

    fd: int


@dataclass(frozen=True)
class Confinement:
    """What one process of a job enters before it execs (see the module doc)."""

    cgroup: JobCgroup
    user: Identity | None  # None: stay who we are (a worker that is not root)
    mounts: NewMounts | JoinMounts | None  # None: the host's (nothing to make or join)
    cwds: tuple[str, ...]  # tried in order, as the user
    # The leader must start in its first directory (or the launch fails saying why); a task
    # falls back to the next, then "/".
    cwd_required: bool = False


def enter(c: Confinement) -> None:
    """Apply `c` to the calling process (a forked child about to exec; os calls only).
    Raises SetupFailed naming the step; the caller must then exit without running the job."""
    stage = "joining the job's cgroup"
    try:
        c.cgroup.enter()
        stage = "starting a session"
        os.setsid()
        _default_signals()
        stage = "resetting the job's OOM score"
        _write_proc_self("oom_score_adj", b"0")
        stage = "giving the job a /tmp and /dev/shm of its own"
        if isinstance(c.mounts, NewMounts):
            made = make_private_mounts(c.mounts.tmp_bytes, c.mounts.private_tmp)
            if made and c.mounts.hand_over is not None:
                hand_over_namespace(c.mounts.hand_over)
        elif isinstance(c.mounts, JoinMounts):
            stage = "joining the job's /tmp and /dev/shm"
            _check(_LIBC.setns(c.mounts.fd, _CLONE_NEWNS))
        if c.user is not None:
            stage = "switching to the job's user"
            os.setgroups(list(c.user.groups))
            os.setgid(c.user.gid)
            os.setuid(c.user.uid)
            if os.getuid() != c.user.uid or os.geteuid() != c.user.uid:
                raise PermissionError(errno.EPERM, "the user switch did not take")
        stage = "starting a session keyring of its own"
        new_session_keyring()
    except BaseException as exc:
        raise SetupFailed(f"{stage}: {_detail(exc)}") from None
    _enter_cwd(c.cwds, c.cwd_required)


def _enter_cwd(cwds: tuple[str, ...], required: bool) -> None:
    for cwd in cwds:
        try:
            os.chdir(cwd)
            return
        except OSError as exc:
            if required:
                raise SetupFailed(f"cannot enter working directory {cwd}: {_detail(exc)}") from None
    try:
        os.chdir("/")
    except OSError as exc:
        raise SetupFailed(f"cannot enter /: {_detail(exc)}") from None


def _detail(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write_proc_self(name: str, value: bytes) -> None:
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value)
    finally:
        os.close(fd)


def _default_signals() -> None:
    """Every signal back to its default and none blocked: an ignored signal stays ignored
    across exec, so a job would otherwise inherit the keeper's or the worker's choices."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


# --- the job's mount namespace ---------------------------------------------------------------


def make_private_mounts(tmp_bytes: int | None, private_tmp: bool) -> bool:
    """Move the calling process into a mount namespace of its own with a fresh tmpfs on
    /dev/shm and, with `private_tmp`, another on /tmp (Slurm's job_container/tmpfs gives jobs
    a private /tmp and /dev/shm too). Their pages are charged to the job's memory cgroup and
    the /tmp one is no larger than the job's memory limit (`tmp_bytes`), so nothing the job
    puts there outlives it, fills a disk or needs removing: the mounts go with the namespace.
    No other job or user sees the job's temporary files or can plant names there before it.
    Host mounts still reach the job (slave propagation). True when the namespace was made;
    False where it cannot be (not root, or a container without CAP_SYS_ADMIN): /dev/shm and
    /tmp then stay the host's, for every process of the job alike."""
    if os.geteuid() != 0:
        return False
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        if err in (errno.EPERM, errno.ENOSYS, errno.EINVAL):
            return False
        raise OSError(err, os.strerror(err))
    mounts: list[tuple[bytes | None, bytes, bytes | None, int, bytes | None]] = [
        (None, b"/", None, _MS_REC | _MS_SLAVE, None)
    ]
    if os.path.isdir("/dev/shm"):
        mounts.append((b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777"))
    if private_tmp and os.path.isdir("/tmp"):
        size = f",size={tmp_bytes}" if tmp_bytes else ""
        mounts.append(
            (b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777{size}".encode())
        )
    for args in mounts:
        if _LIBC.mount(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mounting {args[1].decode()}: {os.strerror(err)}")
    return True


def hand_over_namespace(channel: int) -> None:
    """Send a descriptor of the caller's mount namespace on the socket `channel` (to the
    process that will hold it: the keeper, or the task service for a share)."""
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    sock = socket.socket(fileno=channel)
    try:
        socket.send_fds(sock, [NAMESPACE_TAG], [fd])
    finally:
        sock.detach()
        os.close(fd)


def receive(channel: socket.socket) -> tuple[int | None, bytes]:
    """Read `channel` (SOCK_SEQPACKET) until its other end is closed (at the exec, or the
    child's exit): the namespace descriptor handed over, if any, and any other text (a
    failure's message). A descriptor that is not a namespace's is closed, never kept."""
    held: int | None = None
    text = b""
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(channel, 4096, 4, socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        if data == NAMESPACE_TAG and len(fds) == 1 and held is None:
            held = fds[0]
            continue
        for fd in fds:
            os.close(fd)
        if not data:
            return held, text
        text += data


def identity_of(fd: int) -> tuple[int, int]:
    """(st_dev, st_ino) of a namespace descriptor: names the namespace while it lives."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def hold_new_namespace(tmp_bytes: int | None, private_tmp: bool) -> int | None:
    """A new mount namespace made as a job's leader makes its own, held by the descriptor
    returned (None where none can be made): a forked helper makes it, hands it over and exits,
    so the namespace and its tmpfs mounts live exactly as long as the caller keeps the
    descriptor open or a process is in it. Blocking: call off the event loop."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # os calls only from here on, and never return
        code = 0
        try:
            ours.close()
            if make_private_mounts(tmp_bytes, private_tmp):
                hand_over_namespace(theirs.fileno())
        except BaseException as exc:
            code = 1
            with contextlib.suppress(BaseException):
                theirs.send(f"making the share's /tmp and /dev/shm: {_detail(exc)}".encode())
        finally:
            os._exit(code)
    theirs.close()
    try:
        held, failure = receive(ours)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    if failure:
        if held is not None:
            os.close(held)
        raise OSError(errno.EIO, failure.decode("utf-8", "replace"))
    return held


def open_held_namespace(holder: int, holder_start: int | None, fd: int, ident: object) -> int:
    """A descriptor of the namespace that process `holder` (started at `holder_start`, so a
    reused pid is never taken for it) holds open as descriptor `fd`, checked to be the one
    recorded when it was made (`ident`, from `identity_of`). OSError otherwise: the caller
    must then not start the process at all, rather than start it outside the namespace."""
    from xce.worker.keeper.process import process_start

    got = os.open(f"/proc/{holder}/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # After the open: while the holder lives its pid names it, so the descriptor just
        # opened was its own; its namespace is kept alive by the holder, so no other
        # namespace can have that inode meanwhile.
        if holder_start is None or process_start(holder) != holder_start:
            raise OSError(errno.ESRCH, "the job's keeper has ended")
        if not isinstance(ident, list | tuple) or list(identity_of(got)) != list(ident):
            raise OSError(errno.ESTALE, "not the job's namespace")
    except BaseException:
        os.close(got)
        raise
    return got


# --- the session keyring ---------------------------------------------------------------------


def new_session_keyring() -> None:
    """Join a new anonymous session keyring (keyctl JOIN_SESSION_KEYRING with no name): the
    process keeps nothing of its parent's session keyring. A kernel without keys has no
    keyring to leak (ENOSYS is fine)."""
    number = _SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, "no keyctl number known for this architecture")
    if _LIBC.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        if err != errno.ENOSYS:
            raise OSError(err, os.strerror(err))


def private_tmp_for(enabled: bool, *paths: str) -> bool:
    """Whether a job gets a /tmp of its own: the worker's `private_tmp`, unless one of the
    job's directories lies in /tmp as written (a private /tmp would hide it from the job). A
    link from elsewhere into /tmp is not followed here (root does not resolve the user's
    paths): such a directory is simply not found inside the job."""
    return enabled and not any(_under_tmp(p) for p in paths if p)


def _under_tmp(path: str) -> bool:
    normal = "/" + os.path.normpath(path).lstrip("/")  # "//tmp" is /tmp too
    return normal == "/tmp" or normal.startswith("/tmp/")
