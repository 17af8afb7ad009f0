"""`xce launch` when its task never ran: a non-zero status, one line on stderr, no traceback.

The first version exited 0 with Python tracebacks when a host reset the connection in the
`-- CMD` form (the thread that ran the task died, so no status was recorded and the worst of
none was 0): a job, or OpenMPI starting its daemons through `xce launch HOST CMD`, took a
launch that never ran for a success. Here a stand-in task service on 127.0.0.1 misbehaves
in each way a host or an attacker between can make it, and the real `xce launch` runs
against it in a process of its own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from xce.cli.launch import CONNECT_TRIES
from xce.worker.tasks.wire import (
    EXIT,
    HEADER,
    HELLO,
    READY,
    challenge_frame,
    exit_frame,
    frame,
)

Behaviour = Callable[[socket.socket], None]


def _accepts(conn: socket.socket) -> None:
    """Challenge, read the hello, accept it: what the real service does for a good proof."""
    conn.sendall(challenge_frame(os.urandom(32)))
    channel, length = HEADER.unpack(conn.recv(HEADER.size, socket.MSG_WAITALL))
    assert channel == HELLO
    conn.recv(length, socket.MSG_WAITALL)
    conn.sendall(frame(READY, b""))


def _reset(conn: socket.socket) -> None:
    """Read the request, then drop the connection with a reset (RST, not FIN)."""
    conn.recv(65536)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _close_at_once(conn: socket.socket) -> None:
    conn.recv(65536)


def _torn_exit(conn: socket.socket) -> None:
    conn.recv(65536)
    conn.sendall(frame(EXIT, b"{not json"))


def _not_an_object(conn: socket.socket) -> None:
    conn.recv(65536)
    conn.sendall(frame(EXIT, b"[1, 2]"))


def _exits_3(conn: socket.socket) -> None:
    conn.recv(65536)
    conn.sendall(exit_frame(3))


class _DropsEveryHandshake:
    """Close before accepting the hello, as a host under a flood drops pending connections:
    the launch tries again a few times (no task has started), then fails."""

    def __init__(self) -> None:
        self.connections = 0

    def __call__(self, conn: socket.socket) -> None:
        self.connections += 1
        conn.sendall(challenge_frame(os.urandom(32)))
        conn.recv(65536)


def _refuses_the_hello(conn: socket.socket) -> None:
    conn.sendall(challenge_frame(os.urandom(32)))
    conn.recv(65536)
    conn.sendall(exit_frame(None, None, "no attempt here has that job"))


@contextlib.contextmanager
def _service(behaviour: Behaviour, handshake: bool = True) -> Iterator[int]:
    """A task service stand-in that accepts every hello (unless `handshake` is False), then
    treats the connection with `behaviour`."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError, AssertionError):
                if handshake:
                    _accepts(conn)
                behaviour(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        server.close()
        thread.join(5)


def _launch(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "XCE_JOB_ID": "7",
        "XCE_ATTEMPT": "0",
        "XCE_LAUNCH_CRED": "c" * 64,
        "XCE_HOSTS": "h1 h1",
        "XCE_LAUNCH_TASKS": f"h1=127.0.0.1:{port}",
    }
    return subprocess.run(
        [sys.executable, "-m", "xce", "launch", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line_per_task(err: str, tasks: int) -> None:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == tasks and all(x.startswith("xce launch: ") for x in lines), err


@pytest.mark.parametrize(
    "behaviour", [_reset, _close_at_once, _torn_exit, _not_an_object], ids=lambda b: b.__name__
)
@pytest.mark.parametrize("form", ["dashdash", "rsh"])
def test_a_task_that_never_ended_is_a_failed_launch(behaviour: Behaviour, form: str) -> None:
    with _service(behaviour) as port:
        args = ["--", "true"] if form == "dashdash" else ["h1", "true"]
        done = _launch(port, *args)
    assert done.returncode == 255, (done.returncode, done.stderr)
    _one_line_per_task(done.stderr, 2 if form == "dashdash" else 1)


def test_a_host_that_cannot_be_reached_is_a_failed_launch() -> None:
    with _service(_close_at_once) as port:
        pass  # closed: nothing listens on the port any more
    done = _launch(port, "--", "true")
    assert done.returncode == 255, done.stderr
    _one_line_per_task(done.stderr, 2)


def test_the_tasks_own_status_is_the_launchs() -> None:
    with _service(_exits_3) as port:
        done = _launch(port, "--", "true")
    assert done.returncode == 3, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize("form", ["dashdash", "rsh"])
def test_a_host_that_drops_every_handshake_is_a_failed_launch(form: str) -> None:
    dropper = _DropsEveryHandshake()
    with _service(dropper, handshake=False) as port:
        done = _launch(port, *(["--", "true"] if form == "dashdash" else ["h1", "true"]))
    tasks = 2 if form == "dashdash" else 1
    assert done.returncode == 255, (done.returncode, done.stderr)
    _one_line_per_task(done.stderr, tasks)
    assert dropper.connections == CONNECT_TRIES * tasks


def test_a_refused_hello_is_a_failed_launch_with_the_hosts_words() -> None:
    with _service(_refuses_the_hello, handshake=False) as port:
        done = _launch(port, "--", "true")
    assert done.returncode == 255, (done.returncode, done.stderr)
    _one_line_per_task(done.stderr, 2)
    assert "no attempt here has that job" in done.stderr
