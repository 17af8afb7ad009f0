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
from xce.worker.tasks.request import parse_hello
from xce.worker.tasks.wire import (
    EXIT,
    HEADER,
    HELLO,
    READY,
    Session,
    challenge_frame,
    exit_body,
    exit_frame,
    frame,
    ready_frame,
    session_key,
)

# What the stand-in service holds: the credential and attempt `_launch` gives the job.
CRED, JOB, ATTEMPT, HOST = "c" * 64, "7", 0, "h1"

Behaviour = Callable[[socket.socket, Session | None], None]


def _recv_frame(conn: socket.socket) -> tuple[int, bytes]:
    channel, length = HEADER.unpack(conn.recv(HEADER.size, socket.MSG_WAITALL))
    return channel, conn.recv(length, socket.MSG_WAITALL) if length else b""


def _hello(conn: socket.socket) -> bytes:
    """Send a challenge and read the hello: both nonces, the server's first."""
    nonce = os.urandom(32)
    conn.sendall(challenge_frame(nonce))
    channel, data = _recv_frame(conn)
    assert channel == HELLO
    return nonce + parse_hello(data).nonce


def _accepts(conn: socket.socket) -> Session:
    """Challenge, read the hello, accept it and prove the credential back: what the real
    service does for a good proof. The session is the service's end of it."""
    nonces = _hello(conn)
    conn.sendall(ready_frame(CRED, nonces, JOB, ATTEMPT, HOST))
    return Session(session_key(CRED, nonces, JOB, ATTEMPT, HOST), to_server=False)


def _reset(conn: socket.socket, session: Session | None) -> None:
    """Read the request, then drop the connection with a reset (RST, not FIN)."""
    conn.recv(65536)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _close_at_once(conn: socket.socket, session: Session | None) -> None:
    conn.recv(65536)


def _torn_exit(conn: socket.socket, session: Session | None) -> None:
    assert session is not None
    conn.recv(65536)
    conn.sendall(session.seal(EXIT, b"{not json"))


def _not_an_object(conn: socket.socket, session: Session | None) -> None:
    assert session is not None
    conn.recv(65536)
    conn.sendall(session.seal(EXIT, b"[1, 2]"))


def _deep_exit(conn: socket.socket, session: Session | None) -> None:
    """An exit nested deeper than the JSON parser's stack (it raised RecursionError)."""
    assert session is not None
    conn.recv(65536)
    conn.sendall(session.seal(EXIT, b"[" * 100000))


def _forged_exit(conn: socket.socket, session: Session | None) -> None:
    """Whoever sits between the launch and its host, past a real handshake, answers with an
    exit 0 of its own: not sealed with the session's key, so the launch must not believe it."""
    conn.recv(65536)
    conn.sendall(frame(EXIT, exit_body(0) + bytes(32)))


def _replayed_output(conn: socket.socket, session: Session | None) -> None:
    """A real output frame sent twice, then a real exit 0: the copy is out of sequence."""
    assert session is not None
    conn.recv(65536)
    out = session.seal(1, b"once\n")
    conn.sendall(out + out + session.exit_frame(0))


def _exits_3(conn: socket.socket, session: Session | None) -> None:
    assert session is not None
    conn.recv(65536)
    conn.sendall(session.exit_frame(3))


class _DropsEveryHandshake:
    """Close before accepting the hello, as a host under a flood drops pending connections:
    the launch tries again a few times (no task has started), then fails."""

    def __init__(self) -> None:
        self.connections = 0

    def __call__(self, conn: socket.socket, session: Session | None) -> None:
        self.connections += 1
        conn.sendall(challenge_frame(os.urandom(32)))
        conn.recv(65536)


def _refuses_the_hello(conn: socket.socket, session: Session | None) -> None:
    conn.sendall(challenge_frame(os.urandom(32)))
    conn.recv(65536)
    conn.sendall(exit_frame(None, None, "no attempt here has that job"))


def _refuses_deeply(conn: socket.socket, session: Session | None) -> None:
    """A refusal of the hello nested deeper than the JSON parser's stack, within its size."""
    conn.sendall(challenge_frame(os.urandom(32)))
    conn.recv(65536)
    conn.sendall(frame(EXIT, b"[" * 4000))


class _NeverProves:
    """A squatter on the task port: it answers the hello with READY but cannot prove the
    credential (it has no credential), and records whatever the launch sends after."""

    def __init__(self, ready: Callable[[bytes], bytes]) -> None:
        self.ready = ready
        self.after = b""

    def __call__(self, conn: socket.socket, session: Session | None) -> None:
        nonces = _hello(conn)
        conn.sendall(self.ready(nonces))
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                self.after += data


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
                behaviour(conn, _accepts(conn) if handshake else None)

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
    "behaviour",
    [
        _reset,
        _close_at_once,
        _torn_exit,
        _not_an_object,
        _deep_exit,
        _forged_exit,
        _replayed_output,
    ],
    ids=lambda b: b.__name__,
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


def test_a_forged_exit_is_refused_by_the_launch() -> None:
    """Exit 0 from anyone without the session key is not the task's: 255 and one line."""
    with _service(_forged_exit) as port:
        done = _launch(port, "h1", "true")
    assert done.returncode == 255, (done.returncode, done.stderr)
    assert "host h1 sent a frame that fails its check" in done.stderr, done.stderr
    _one_line_per_task(done.stderr, 1)


def test_a_deeply_nested_refusal_is_one_line() -> None:
    with _service(_refuses_deeply, handshake=False) as port:
        done = _launch(port, "--", "true")
    assert done.returncode == 255, (done.returncode, done.stderr)
    _one_line_per_task(done.stderr, 2)


@pytest.mark.parametrize(
    "ready",
    [
        lambda nonces: frame(READY, b""),  # the service of the version before: no proof
        lambda nonces: frame(READY, b'{"proof": "' + b"0" * 64 + b'"}'),
        # a proof of another credential, for the very nonces of this connection
        lambda nonces: ready_frame("d" * 64, nonces, JOB, ATTEMPT, HOST),
        # the right credential, relayed from a connection with other nonces
        lambda nonces: ready_frame(CRED, os.urandom(64), JOB, ATTEMPT, HOST),
    ],
    ids=["empty", "zeros", "other-credential", "other-nonces"],
)
@pytest.mark.parametrize("form", ["dashdash", "rsh"])
def test_a_service_that_does_not_prove_the_credential_gets_nothing(
    ready: Callable[[bytes], bytes], form: str
) -> None:
    squatter = _NeverProves(ready)
    with _service(squatter, handshake=False) as port:
        done = _launch(port, *(["-n", "1", "--", "true"] if form == "dashdash" else ["h1", "true"]))
    assert done.returncode == 255, (done.returncode, done.stderr)
    assert done.stderr == (
        "xce launch: the task service on h1 did not prove the job's credential\n"
    ), done.stderr
    # not the request (argv, environment), not a byte: the launch closed the connection
    assert squatter.after == b"", squatter.after
