"""The per-attempt keeper: the one process that owns a running job (like Slurm's slurmstepd).

The worker (xce/worker/agent/worker_agent.py) starts one small *launcher* process when it starts
(`python -m xce.worker.keeper.process serve ...`, or `xce keeper serve ...` in the packaged binary).
For every job attempt the worker writes the attempt's `spec.json` into the attempt's
root-owned state directory, creates its cgroup, and sends the launcher that directory's path
with three descriptors (the job's stdout and stderr, and a socket for the answer). The
launcher forks a keeper; the keeper:

1. starts its own session (nothing the worker's terminal or service manager sends reaches it),
2. forks the job's leader, which enters the job's isolation (xce/worker/keeper/isolation.py,
   the one code path every process of the job takes: cgroup, session, mount namespace with
   a private /dev/shm and /tmp, the user, a session keyring of its own, the working directory
   entered *as that user*), hands the keeper a descriptor of the job's mount namespace, and
   execs the job,
3. writes `keeper.json` (its pid and start time, the leader's pid, the descriptor it holds the
   job's mount namespace by, for the job's `xce launch` tasks) and answers the worker,
4. waits for the leader; meanwhile it checks the worker's contact file (xce/worker/keeper/fence.py)
   twice a second and kills the whole cgroup once the worker has been out of touch with every
   controller for longer than the fence timeout,
5. when the leader has exited: kills whatever is left in the cgroup, reads the cgroup's usage
   and OOM counter, writes `result.json` (fsynced, renamed into place) and removes the cgroup.

The keeper never reads anything the job can write: its spec, its own files and the contact
file live in the worker's state directory (0700 root). A worker that restarts finds its
keepers through `keeper.json` (pid + start time, so a reused pid is not taken for one) and
carries on watching them: jobs survive a worker restart.

Forked from the launcher, a keeper costs a fork, not an interpreter start. Standard library
and `xce.worker.cgroups` / `xce.worker.keeper.fence` / `.isolation` only.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import resource
import select
import signal
import socket
import sys
from typing import Any

from xce.worker.cgroups import CgroupBackend, JobCgroup, Limits, detect
from xce.worker.keeper import fence, isolation

SPEC = "spec.json"
KEEPER = "keeper.json"
RESULT = "result.json"
# keeper.json's record of the job's mount namespace: the descriptor the keeper holds it by.
MOUNT_NAMESPACE = "mount_namespace"
WATCH_INTERVAL_S = 0.5


def process_start(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat): with
    the pid it names one process for ever, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


RESERVED_BYTES = 16384


def reserve(directory: str, name: str) -> int | None:
    """Make `name`'s temp file now, with its blocks (see `write_json`); None if that fails
    (the write then tries to make it when it is needed)."""
    try:
        fd = os.open(
            os.path.join(directory, name + ".tmp"),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return None
    with contextlib.suppress(OSError):  # no blocks set aside: the inode at least
        os.posix_fallocate(fd, 0, RESERVED_BYTES)
    return fd


def write_json(
    directory: str,
    name: str,
    body: dict[str, Any],
    reserved: int | None = None,
    durable: bool = False,
) -> None:
    """Atomically: temp file, rename (readers see the old file or the new one, never a part).
    `durable` adds the fsyncs that make it survive a power cut; the attempt's own records do
    without (a power cut ends its processes too, and the controller then treats the host as
    failed), the finish report does not. `reserved` is the temp file made earlier by
    `reserve` (written in place, then renamed)."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        tmp = name + ".tmp"
        data = json.dumps(body).encode()
        if reserved is not None and len(data) <= RESERVED_BYTES:
            fd = reserved
        else:
            if reserved is not None:
                os.close(reserved)
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if durable:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(directory: str, name: str, missing_only: bool = False) -> dict[str, Any] | None:
    """The file's object, or None if it is absent or not one. With `missing_only`, an error
    other than "absent" (EMFILE, EIO) is raised: the caller must not take it for absence."""
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        if missing_only:
            raise
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            body = json.loads(f.read())
    except ValueError:
        return None
    except OSError:
        if missing_only:
            raise
        return None
    return body if isinstance(body, dict) else None


# --- the job's leader (runs in the forked child, never returns) ---------------------------


def _confinement(spec: dict[str, Any], cgroup: JobCgroup, hand_over: int) -> isolation.Confinement:
    """The leader's isolation (xce/worker/keeper/isolation.py, the same for every process of
    the job): it makes the job's mount namespace and hands a descriptor of it to the keeper,
    through which the job's `xce launch` tasks join it."""
    user = None
    if spec.get("uid") is not None:
        user = isolation.User(
            int(spec["uid"]), int(spec["gid"]), tuple(spec["groups"]), str(spec.get("user"))
        )
    return isolation.Confinement(
        cgroup=cgroup,
        user=user,
        mounts=isolation.NewMounts(
            (spec.get("limits") or {}).get("memory_bytes"),
            bool(spec.get("private_tmp")),
            hand_over,
        ),
        cwds=(spec["cwd"],),
        cwd_required=True,
    )


def _exec_job(
    spec: dict[str, Any], cgroup: JobCgroup, stdout: int, stderr: int, report: int
) -> None:
    """The leader: `isolation.enter`, the job's output, exec. A failure's message goes to the
    keeper on `report` (closed by the exec), whose other messages carry the namespace."""
    stage = "setting up the job"
    try:
        isolation.enter(_confinement(spec, cgroup, report))
        stage = "setting up the job's output"
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.closerange(3, report)
        os.closerange(report + 1, max(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        stage = f"cannot run {spec['argv'][0]}"
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as exc:
        if isinstance(exc, isolation.SetupFailed):
            message = str(exc)
        else:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            message = f"{stage}: {detail}"
        try:
            os.write(report, message.encode("utf-8", "replace")[:4000])
        finally:
            os._exit(127)


# --- the keeper -----------------------------------------------------------------------------


def _answer(sock: socket.socket, body: dict[str, Any]) -> None:
    # A worker that went away finds the attempt through keeper.json / result.json.
    with contextlib.suppress(OSError):
        sock.send(json.dumps(body).encode())


def keep(backend: CgroupBackend, attempt_dir: str, fds: list[int]) -> int:
    """Run one attempt to its end (see the module doc). Returns the keeper's exit code."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    os.setsid()
    # The keeper is small and must record the job's end: the OOM killer passes it by.
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")
    stdout, stderr, reply_fd = fds
    reply = socket.socket(fileno=reply_fd)
    spec = read_json(attempt_dir, SPEC)
    if spec is None:
        _answer(reply, {"error": "the attempt's spec is missing"})
        return 1
    if backend.kind == "none":
        # No cgroup to open: the limits become rlimits of the leader, its session is the job.
        cgroup: JobCgroup | None = backend.create(spec["cgroup"], Limits(**spec["limits"]))
    else:
        cgroup = backend.open(spec["cgroup"])  # made by the worker, with its limits
    if cgroup is None:
        _answer(reply, {"error": "the job's cgroup is missing"})
        return 1
    started_at = fence.now()
    # Both ends close on exec: the leader's at its exec, so the keeper reads to the end.
    report, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    leader = os.fork()
    if leader == 0:
        reply.detach()
        report.close()
        _exec_job(spec, cgroup, stdout, stderr, theirs.fileno())
    theirs.close()
    os.close(stdout)
    os.close(stderr)
    # The job's mount namespace, held for the job's life: its tasks join it through this
    # descriptor (xce/worker/tasks/service.py), never through a process the job controls.
    namespace, failure = isolation.receive(report)
    report.close()
    if failure:
        if namespace is not None:
            os.close(namespace)
        os.waitpid(leader, 0)
        message = failure.decode("utf-8", "replace")
        cgroup.kill()
        write_json(attempt_dir, RESULT, {"launch_error": message})
        cgroup.remove()
        _answer(reply, {"error": message})
        return 0
    cgroup.set_leader(leader)
    write_json(
        attempt_dir,
        KEEPER,
        {
            "keeper": os.getpid(),
            "keeper_start": process_start(os.getpid()),
            "leader": leader,
            "started_at": started_at,
            # None: the job has the host's mounts (not root, or no CAP_SYS_ADMIN), and so
            # do its tasks.
            MOUNT_NAMESPACE: None
            if namespace is None
            else {"fd": namespace, "id": list(isolation.identity_of(namespace))},
        },
    )
    # The keeper's start time goes with its pid: the launcher does not wait for keepers, so
    # by the time the worker read it from /proc the pid could name another process.
    _answer(
        reply,
        {
            "keeper": os.getpid(),
            "keeper_start": process_start(os.getpid()),
            "leader": leader,
            "started_at": started_at,
        },
    )
    reply.close()
    return _watch(spec, cgroup, attempt_dir, leader, started_at)


def _watch(
    spec: dict[str, Any], cgroup: JobCgroup, attempt_dir: str, leader: int, started_at: float
) -> int:
    worker_state = spec["worker_state"]
    # The result's file and blocks are taken now, while the job cannot yet have filled the
    # file system: its end is recorded whatever it does there.
    reserved = reserve(attempt_dir, RESULT)
    launched_contact = spec.get("contact") or {}
    baseline = fence.Contact(
        float(launched_contact.get("at", started_at)),
        float(launched_contact.get("fence_timeout_s", fence.DEFAULT_FENCE_TIMEOUT_S)),
    )
    pidfd = os.pidfd_open(leader)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    fenced: float | None = None
    contact = baseline
    try:
        while not poller.poll(WATCH_INTERVAL_S * 1000):
            if fenced is not None:
                cgroup.kill()
                continue
            latest = fence.read(worker_state)  # None: unreadable or torn, keep the last one
            if latest is not None and latest.at >= contact.at:
                contact = latest
            if contact.expired():
                fenced = contact.silent_for()
                cgroup.kill()
    finally:
        os.close(pidfd)
    _, status, rusage = os.wait4(leader, 0)
    ended_at = fence.now()
    cgroup.kill()  # whatever the leader left behind goes with it
    usage = cgroup.usage()
    result: dict[str, Any] = {
        "status": status,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "exit_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_user_s": max(usage.cpu_user_s, rusage.ru_utime),
        "cpu_system_s": max(usage.cpu_system_s, rusage.ru_stime),
        "max_rss_bytes": usage.memory_peak_bytes,
        "leader_maxrss_bytes": rusage.ru_maxrss * 1024,
        "wall_time_s": ended_at - started_at,
        "oom_killed": cgroup.oom_killed(),
        "ended_at": ended_at,
    }
    if fenced is not None:
        result["fenced_after_s"] = round(fenced, 3)
    write_json(attempt_dir, RESULT, result, reserved)
    cgroup.remove()
    return 0


# --- the launcher ---------------------------------------------------------------------------


def _receive(sock: socket.socket) -> tuple[str, list[int]] | None:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(3 * fds.itemsize))
    if not msg:
        return None
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return msg.decode(), list(fds)


def serve(control_fd: int, backend: CgroupBackend) -> None:
    """Fork one keeper per request until the worker closes its end of the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=control_fd)
    while True:
        try:
            request = _receive(sock)
        except InterruptedError:
            continue
        except OSError:
            return
        if request is None:
            return
        attempt_dir, fds = request
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                sock.close()
                code = keep(backend, attempt_dir, fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


def main(argv: list[str] | None = None) -> None:
    """`serve CONTROL_FD KIND PARENT NAMESPACE`: the launcher the worker starts."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5 or args[0] != "serve":
        sys.stderr.write("usage: xce keeper serve CONTROL_FD KIND PARENT NAMESPACE\n")
        sys.exit(2)
    serve(int(args[1]), detect(args[2], args[3], args[4]))


if __name__ == "__main__":
    main()
