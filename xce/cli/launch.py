"""`xce launch`: start tasks of the current job on its hosts (srun / blaunch).

    xce launch [-n N] [--per-host K] [--host H]... [-l] -- CMD [ARG...]
    xce launch HOST CMD...        (rsh form: `mpirun --mca plm_rsh_agent "xce launch"`)

It runs inside a job and uses only what the first host's worker put in the job's
environment: XCE_JOB_ID, XCE_ATTEMPT, XCE_HOSTS (one name per slot), XCE_LAUNCH_CRED (the
attempt's credential) and XCE_LAUNCH_TASKS (`host=addr,...`: each host's task service). No
controller is asked, so it is as fast as a Python start-up and works while the controller is
away. Each task is one TCP connection to its host's task service (xce/worker/tasks/service.py),
and the two ends prove the credential to each other before anything of the task is sent
(xce/worker/tasks/wire.py: the credential itself is never sent); a service that does not
prove it gets no request, and every frame after is sealed, so no one between can run a task
of their own on the connection or forge its output or exit status;
output comes back as it is written, stdin goes to task 0 (the rsh form: to its one task),
and the exit status is the worst of the tasks' (a signal as 128 + its number).
Standard library only, so the job's `xce` starts fast.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

from xce.worker.tasks.wire import (
    CHALLENGE,
    EXIT,
    HEADER,
    MAX_ANSWER,
    MAX_CHALLENGE,
    MAX_FRAME,
    READY,
    STDERR,
    STDIN,
    STDOUT,
    TAG_BYTES,
    ClientHandshake,
    NotProven,
    Session,
    flat_object,
)

USAGE = (
    "usage: xce launch [-n N] [--per-host K] [--host H] [-l] -- CMD [ARG...]"
    " | xce launch HOST CMD..."
)


# The exit status of a task that could not be started or whose end was never heard (its
# host refused it, could not be reached, or dropped the connection): like ssh's, so that
# OpenMPI, which starts its daemons through `xce launch HOST CMD`, sees the failure.
NOT_RUN = 255
# Tries of a connection the service drops before it accepted the credential: under a flood of
# connections that prove nothing, a host drops the oldest pending ones, and a launch that
# was slow to answer may be among them (xce/worker/tasks/handshake.py). No task has started.
# The waits between grow to RETRY_MAX_S, each drawn at random about its value (so the tasks
# of one launch do not all come back at the same moment): some 10 s in all.
CONNECT_TRIES = 9
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0


def retry_wait(tried: int) -> float:
    """The wait after the `tried`th dropped try: doubling up to RETRY_MAX_S, 0.5 to 1.5 times."""
    return min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (tried - 1)) * random.uniform(0.5, 1.5)


class LaunchFailed(Exception):
    """A one-line reason `xce launch` cannot run (exit 2 for usage, NOT_RUN otherwise: the
    rsh form is how OpenMPI starts its daemons, and like ssh's, 255 is what says "not run")."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage or message == USAGE


class Refused(Exception):
    """The service answered the hello with an exit frame: the task was not started."""

    def __init__(self, body: dict[str, Any]) -> None:
        error = str(body.get("error") or "the task service refused the task")
        super().__init__(error)
        self.body = {**body, "error": error}


class Dropped(OSError):
    """The service closed the connection before it accepted the credential."""


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise Dropped("the task service closed the connection")
        data += chunk
    return data


def _recv_frame(sock: socket.socket, limit: int) -> tuple[int, bytes]:
    channel, length = HEADER.unpack(_recv_exactly(sock, HEADER.size))
    if length > limit:
        raise ValueError("the task service sent a bad frame")
    return channel, _recv_exactly(sock, length)


def open_task(
    where: tuple[str, int], job_id: str, attempt: int, credential: str, host: str
) -> tuple[socket.socket, Session]:
    """A connection to `host`'s task service, each end having proven the attempt's
    credential to the other, and its session (the caller sends the sealed request next).
    Refused with the service's answer where it refuses; NotProven where it answers without
    proving the credential; Dropped where it closes the connection first; other OSError or
    ValueError otherwise."""
    sock = socket.create_connection(where, timeout=30)
    try:
        channel, data = _recv_frame(sock, MAX_CHALLENGE)
        if channel != CHALLENGE:
            raise ValueError("the task service sent no challenge")
        handshake = ClientHandshake(credential, job_id, attempt, host)
        sock.sendall(handshake.hello(data))
        channel, data = _recv_frame(sock, MAX_ANSWER)
        if channel == EXIT:
            raise Refused(flat_object(data, "the task service's answer"))
        if channel != READY:
            raise ValueError("the task service sent a bad answer to the hello")
        session = handshake.session(data)
        sock.settimeout(None)
        return sock, session
    except BaseException:
        sock.close()
        raise


@dataclass(frozen=True)
class Task:
    task_id: int
    local_task_id: int
    host: str


def allocation(env: dict[str, str]) -> list[tuple[str, int]]:
    """The job's hosts and their slots from XCE_HOSTS (one name per slot, first host first)."""
    hosts: dict[str, int] = {}
    for name in env.get("XCE_HOSTS", "").split():
        hosts[name] = hosts.get(name, 0) + 1
    if not hosts and env.get("XCE_EXEC_HOST"):  # a single-host job
        hosts[env["XCE_EXEC_HOST"]] = int(env.get("XCE_SLOTS") or 1)
    return list(hosts.items())


def plan(
    hosts: list[tuple[str, int]], count: int | None, per_host: int | None, only: list[str]
) -> list[Task]:
    """Tasks per host, in allocation order: `--per-host K` on each chosen host, else the
    host's slots; `-n N` cuts the list to N (or, beyond the slots, goes round again)."""
    chosen = [(h, s) for h, s in hosts if not only or h in only]
    missing = [h for h in only if h not in dict(hosts)]
    if missing:
        raise LaunchFailed(
            f"host {missing[0]} is not in this job's allocation ({', '.join(h for h, _ in hosts)})"
        )
    slots = [(h, per_host if per_host else s) for h, s in chosen]
    order = [h for h, s in slots for _ in range(s)]
    if count is not None:
        if not order:
            order = [h for h, _ in chosen]
        order = [order[i % len(order)] for i in range(count)]
    local: dict[str, int] = {}
    tasks = []
    for i, host in enumerate(sorted(order, key=[h for h, _ in chosen].index)):
        tasks.append(Task(i, local.get(host, 0), host))
        local[host] = local.get(host, 0) + 1
    return tasks


def addresses(env: dict[str, str]) -> dict[str, tuple[str, int]]:
    out = {}
    for item in env.get("XCE_LAUNCH_TASKS", "").split(","):
        host, _, addr = item.partition("=")
        name, _, port = addr.rpartition(":")
        if host and port.isdigit():
            out[host] = (name.strip("[]"), int(port))
    return out


class Runner:
    """One connection per task; output written under one lock, optionally prefixed."""

    def __init__(self, env: dict[str, str], label: bool) -> None:
        self.env = env
        self.label = label
        self.lock = threading.Lock()
        self.status: dict[int, int] = {}
        self.tasks = addresses(env)
        missing = [k for k in ("XCE_JOB_ID", "XCE_ATTEMPT", "XCE_LAUNCH_CRED") if k not in env]
        if missing:
            raise LaunchFailed(f"not inside an XCE job ({missing[0]} is not set)")

    def connect(self, task: Task, argv: list[str]) -> tuple[socket.socket, Session]:
        where = self.tasks.get(task.host)
        if where is None:
            raise LaunchFailed(f"no task service is known for host {task.host}")
        job_id, attempt = self.env["XCE_JOB_ID"], int(self.env["XCE_ATTEMPT"])
        for tried in range(1, CONNECT_TRIES + 1):
            try:
                sock, session = open_task(
                    where, job_id, attempt, self.env["XCE_LAUNCH_CRED"], task.host
                )
                break
            except Dropped:
                if tried == CONNECT_TRIES:
                    raise
                time.sleep(retry_wait(tried))
        request = {
            "argv": argv,
            # Not the credential: the task's host sets it from its own assignment.
            "env": {k: v for k, v in self.env.items() if k != "XCE_LAUNCH_CRED"},
            "task_id": task.task_id,
            "local_task_id": task.local_task_id,
        }
        sock.sendall(session.request_frame(request))
        return sock, session

    def _write(self, out: BinaryIO, task: Task, data: bytes, pending: dict[int, bytes]) -> None:
        if not self.label:
            with self.lock:
                out.write(data)
                out.flush()
            return
        data = pending.pop(id(out), b"") + data
        *lines, rest = data.split(b"\n")
        if rest:
            pending[id(out)] = rest
        if lines:
            with self.lock:
                out.write(b"".join(b"%d: %s\n" % (task.task_id, line) for line in lines))
                out.flush()

    def run_task(self, task: Task, argv: list[str], stdin: BinaryIO | None) -> None:
        """Run one task to its end; whatever goes wrong is one line on stderr and
        `NOT_RUN` as its status, never a traceback (this runs in a thread of its own)."""
        try:
            sock, session = self.connect(task, argv)
        except Refused as exc:
            self._exited(task, exc.body)
            return
        except NotProven:
            # Nothing of the task was sent: whoever answered may have taken over the port.
            self._fail(task, f"the task service on {task.host} did not prove the job's credential")
            return
        except Exception as exc:  # OSError, ValueError, LaunchFailed, anything: one line
            self._fail(task, f"cannot reach host {task.host}: {_reason(exc)}")
            return
        try:
            self._converse(task, sock, session, stdin)
        except NotProven:
            self._fail(task, f"host {task.host} sent a frame that fails its check")
        except (OSError, ValueError) as exc:  # reset, refused mid-way, a torn exit frame
            self._fail(task, f"lost the connection to host {task.host}: {_reason(exc)}")
        except Exception as exc:
            self._fail(task, f"task {task.task_id} on {task.host}: {_reason(exc)}")
        finally:
            sock.close()

    def _converse(
        self, task: Task, sock: socket.socket, session: Session, stdin: BinaryIO | None
    ) -> None:
        """Stdin out, output in, to the EXIT frame; each frame in is checked against the
        session first (NotProven where it fails), so nothing forged is written or believed."""
        if stdin is not None:
            threading.Thread(target=_feed, args=(sock, session, stdin), daemon=True).start()
        else:
            sock.sendall(session.seal(STDIN, b""))
        reader = sock.makefile("rb")
        pending: dict[int, bytes] = {}
        outs = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
        try:
            while True:
                head = reader.read(HEADER.size)
                if len(head) < HEADER.size:
                    self._fail(task, f"host {task.host} closed the connection")
                    return
                channel, length = HEADER.unpack(head)
                if length > MAX_FRAME + TAG_BYTES:
                    self._fail(task, f"host {task.host} sent a bad frame")
                    return
                data = reader.read(length)
                if len(data) < length:
                    self._fail(task, f"host {task.host} closed the connection")
                    return
                data = session.open(channel, data)
                if channel == EXIT:
                    for out_id, rest in pending.items():
                        out = next(o for o in outs.values() if id(o) == out_id)
                        self._write(out, task, rest + b"\n", {})
                    self._exited(task, flat_object(data, "the exit frame"))
                    return
                if channel in outs:
                    self._write(outs[channel], task, data, pending)
        finally:
            reader.close()

    def _exited(self, task: Task, body: dict[str, object]) -> None:
        if body.get("error"):
            self._fail(task, f"task {task.task_id} on {task.host}: {body['error']}")
            return
        code, sig = body.get("exit_code"), body.get("signal")
        self.status[task.task_id] = (
            int(code) if isinstance(code, int) else 128 + (sig if isinstance(sig, int) else 0)
        )

    def _fail(self, task: Task, message: str) -> None:
        line = " ".join(message.split())  # one line, whatever the reason held
        with self.lock:
            try:
                sys.stderr.write(f"xce launch: {line}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # stderr closed: the status still says it
            self.status[task.task_id] = NOT_RUN

    def worst(self, tasks: list[Task]) -> int:
        """The exit status: the worst task's; `NOT_RUN` for a task whose end was not heard."""
        return max((self.status.get(t.task_id, NOT_RUN) for t in tasks), default=0)


def _reason(exc: BaseException) -> str:
    """An exception as a short phrase: the OS's words for an OSError, else its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _feed(sock: socket.socket, session: Session, stdin: BinaryIO) -> None:
    """Send stdin to the task. Read from the descriptor, not the buffered object: this
    daemon thread may still be reading when the launch exits, and an interpreter that shuts
    down while a thread holds stdin's buffer lock aborts (a core dump, not the status)."""
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):
        fd = None
    try:
        while data := os.read(fd, 65536) if fd is not None else stdin.read(65536):
            sock.sendall(session.seal(STDIN, data))
        sock.sendall(session.seal(STDIN, b""))
    except (OSError, ValueError):
        pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="xce launch", usage=USAGE.removeprefix("usage: "), add_help=True
    )
    p.add_argument("-n", "--ntasks", type=int, help="tasks in all (default: one per slot)")
    p.add_argument("--per-host", type=int, help="tasks on each chosen host")
    p.add_argument("--host", action="append", default=[], help="only this host (repeatable)")
    p.add_argument("-l", "--label", action="store_true", help="prefix lines with the task id")
    return p


def main(args: list[str]) -> int:
    env = dict(os.environ)
    try:
        if args and not args[0].startswith("-"):
            # rsh form: HOST CMD..., the command a remote shell would run (one task)
            if len(args) < 2:
                raise LaunchFailed(USAGE)
            host, line = args[0], " ".join(args[1:])
            runner = Runner(env, False)
            if host not in dict(allocation(env)):
                raise LaunchFailed(f"host {host} is not in this job's allocation")
            task = Task(0, 0, host)
            runner.run_task(task, ["/bin/sh", "-c", line], sys.stdin.buffer)
            return runner.worst([task])
        if "--" in args:
            split = args.index("--")
            options, command = args[:split], args[split + 1 :]
        else:
            options, command = args, []
        ns, rest = _parser().parse_known_args(options)
        command = rest + command
        if not command:
            raise LaunchFailed(USAGE)
        for value, name in ((ns.ntasks, "-n"), (ns.per_host, "--per-host")):
            if value is not None and value < 1:
                raise LaunchFailed(f"{name} must be at least 1", usage=True)
        runner = Runner(env, ns.label)
        tasks = plan(allocation(env), ns.ntasks, ns.per_host, ns.host)
        threads = [
            threading.Thread(
                target=runner.run_task,
                args=(t, command, sys.stdin.buffer if t.task_id == 0 else None),
                daemon=True,
            )
            for t in tasks
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return runner.worst(tasks)
    except LaunchFailed as exc:
        sys.stderr.write(f"xce launch: {exc}\n")
        return 2 if exc.usage else NOT_RUN
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # never a traceback: one line, and the launch failed
        sys.stderr.write(f"xce launch: {' '.join(_reason(exc).split())}\n")
        return NOT_RUN
