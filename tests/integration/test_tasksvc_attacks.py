"""The task service under attack by anyone who can reach it, played with real processes: a
controller and a worker on 127.0.0.1, a running job, and a real `xce launch` inside it.

- A flood of connections that prove nothing (they used to hold all 512 slots for 30 s each),
  from many addresses of 127/8, must not keep the job's own launch out, nor drop a hello
  that waits for its attempt's assignment.
- A hello dripped one byte at a time must be dropped at the handshake deadline, not held
  for as long as each byte comes in time.
- A wrong credential for a running attempt and any credential for an attempt the host does
  not run get the same bytes back (the answers used to differ in words and in timing).
- The credential never crosses the wire: `xce launch` proves it instead.
- Whoever sits between a launch and the service (one who took over the task port a job
  still knows, after a restart of the worker) may relay the handshake but cannot run a
  request of its own on the proven connection, nor pass off an exit to the launch.
- One job holding many proven connections, sending nothing, cannot keep another job's
  launch on the same host out.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.test_launch_e2e import _job_env
from tests.integration.test_launch_failures import _launch, _service
from xce.cli.launch import Refused, open_task
from xce.worker.tasks.request import parse_hello
from xce.worker.tasks.service import PER_ATTEMPT_FLOOR
from xce.worker.tasks.wire import (
    CHALLENGE,
    EXIT,
    HEADER,
    HELLO,
    READY,
    REQUEST,
    Session,
    challenge_frame,
    frame,
    hello_frame,
    proof,
    read_challenge,
    ready_frame,
    session_key,
)

FLOOD = 720  # beyond the 512 connections the service used to hold, whatever they proved


@pytest.fixture
def one(tmp_path: Path) -> Iterator[Cluster]:
    """A controller and one worker (w1, 4 slots)."""
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4)
    c.wait_for(lambda: len(c.get("/api/v1/hosts")["hosts"]) == 1, 60, "the worker")
    try:
        yield c
    finally:
        c.stop()


def _where(env: dict[str, str]) -> tuple[str, int]:
    tasks = dict(item.split("=", 1) for item in env["XCE_LAUNCH_TASKS"].split(","))
    host, _, port = tasks[env["XCE_EXEC_HOST"]].rpartition(":")
    return host, int(port)


class Flood:
    """Keeps `count` connections open to `where` that never say a word, from 200 loopback
    addresses (any user on the host may use any of 127/8), and keeps opening new ones
    (closing its oldest), as an attacker on the host would to hold every slot the service
    has."""

    def __init__(self, where: tuple[str, int], count: int) -> None:
        self.where = where
        self.count = count
        self.full = threading.Event()
        self.stop = threading.Event()
        self.opened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        held: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                source = f"127.0.{2 + self.opened % 200}.1"
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection(self.where, 5, (source, 0)))
                    self.opened += 1
                if len(held) > self.count:
                    held.pop(0).close()
                if len(held) >= self.count:
                    self.full.set()
                    self.stop.wait(0.001)  # then a steady stream of new ones
        finally:
            for sock in held:
                sock.close()

    def __enter__(self) -> Flood:
        self.thread.start()
        assert self.full.wait(120), f"the flood opened {self.opened} connections only"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_a_flood_of_connections_without_a_credential_does_not_block_a_launch(
    one: Cluster,
) -> None:
    go = one.jobs_root / "go"
    env_file = one.jobs_root / "flood.env"
    script = (
        f"env > {env_file}.tmp; mv {env_file}.tmp {env_file}; "
        f"while [ ! -e {go} ]; do sleep 0.1; done; "
        "xce launch -l -- echo launched; echo first=$?; "
        # a task that launches one of its own (an MPI daemon does): its host gives it the
        # credential, which the launch no longer sends
        "xce launch -n 1 -- xce launch -n 1 -- echo nested; echo second=$?"
    )
    job_id = one.submit(command=script, slots=2)
    one.wait_for(env_file.exists, 60, "the job's environment")
    env = dict(x.split("=", 1) for x in env_file.read_text().splitlines() if "=" in x)
    with Flood(_where(env), FLOOD) as flood:
        go.touch()
        job = one.wait_state(job_id, "DONE", "EXIT", timeout=120)
        during = flood.opened
    out = one.download(job_id, "stdout").decode()
    err = one.download(job_id, "stderr").decode()
    assert job["state"] == "DONE", (job, out, err)
    lines = out.splitlines()
    assert sorted(x for x in lines if "launched" in x) == ["0: launched", "1: launched"], out
    assert "first=0" in lines and "nested" in lines and "second=0" in lines, (out, err)
    assert during > FLOOD, during  # the flood went on while the job launched
    logs = "".join(log.read_text() for log in one.logs if log.exists())
    assert "Traceback" not in logs, one.log_text()  # dropped connections are no errors


def test_a_launch_gets_in_past_idle_connections_that_fill_every_slot(one: Cluster) -> None:
    """Right after a burst of idle connections, all still within their handshake deadline,
    one hello that proves the credential is accepted at its first try: the service drops the
    oldest idle connection to make room instead of closing the newcomer."""
    job_id, env = _job_env(one, "burst", 2)
    where = _where(env)
    idle = [socket.create_connection(where, 5, (f"127.0.0.{1 + i % 4}", 0)) for i in range(FLOOD)]
    try:
        sock, _ = open_task(
            where, job_id, int(env["XCE_ATTEMPT"]), env["XCE_LAUNCH_CRED"], env["XCE_EXEC_HOST"]
        )
        sock.close()  # accepted: the request would come next
    finally:
        for s in idle:
            s.close()
    one.control(job_id, "kill")


def test_a_hello_dripped_byte_by_byte_is_dropped_at_the_handshake_deadline(
    one: Cluster,
) -> None:
    """Each byte comes well within any per-read timeout; only a deadline for the whole
    hello drops the connection before the hello is complete."""
    job_id, env = _job_env(one, "drip", 2)
    where = _where(env)
    with socket.create_connection(where, timeout=30) as sock:
        reader = sock.makefile("rb")
        channel, length = HEADER.unpack(reader.read(HEADER.size))
        assert channel == CHALLENGE
        nonce = read_challenge(reader.read(length))
        long_id = job_id + "-" + "x" * (126 - len(job_id))  # a valid, long job id
        hello = hello_frame("0" * 64, nonce, long_id, 0, env["XCE_EXEC_HOST"], bytes(32))
        sent = 0
        for byte in hello:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sent += 1
            if select.select([sock], [], [], 0.1)[0]:
                break  # the service answered (or closed): it is done with us
        assert sent < len(hello), "the service waited for the whole dripped hello"
        head = reader.read(HEADER.size)
        assert len(head) == HEADER.size and HEADER.unpack(head)[0] == EXIT, head
        answer = json.loads(reader.read(HEADER.unpack(head)[1]))
        assert "no hello within" in answer["error"], answer
        assert reader.read(1) == b""  # and closed
    # and not a line in the worker's log: anyone can make as many as they like
    logs = "".join(log.read_text() for log in one.logs if log.exists())
    assert "no hello within" not in logs
    one.control(job_id, "kill")


def _answer(
    where: tuple[str, int],
    credential: str,
    job_id: str,
    attempt: int,
    host: str,
    whole: bool = True,
) -> bytes:
    """Every byte the service sends after a hello of `credential` for the attempt, to EOF
    (`whole`), else its first frame's header."""
    with socket.create_connection(where, timeout=30) as sock:
        reader = sock.makefile("rb")
        channel, length = HEADER.unpack(reader.read(HEADER.size))
        assert channel == CHALLENGE
        nonce = read_challenge(reader.read(length))
        sock.sendall(hello_frame(credential, nonce, job_id, attempt, host, os.urandom(32)))
        return reader.read() if whole else reader.read(HEADER.size)


def test_a_wrong_credential_and_an_unknown_attempt_get_the_same_bytes(one: Cluster) -> None:
    job_id, env = _job_env(one, "same", 2)
    where, host = _where(env), env["XCE_EXEC_HOST"]
    attempt, good = int(env["XCE_ATTEMPT"]), env["XCE_LAUNCH_CRED"]
    cases = {
        "running, wrong credential": ("0" * 64, job_id, attempt),
        "running, another attempt's number": (good, job_id, attempt + 1),
        "no such job": (good, "999999", attempt),
    }
    with ThreadPoolExecutor(len(cases) + 1) as pool:
        right = pool.submit(_answer, where, good, job_id, attempt, host, False)
        answers = dict(
            zip(cases, pool.map(lambda c: _answer(where, *c, host), cases.values()), strict=True)
        )
        # the right credential is accepted on that very service (so the refusals can fail)
        assert HEADER.unpack(right.result())[0] == READY
    assert len(set(answers.values())) == 1, answers
    refusal = answers["no such job"]
    channel, length = HEADER.unpack(refusal[: HEADER.size])
    assert channel == EXIT and len(refusal) == HEADER.size + length, refusal
    body = json.loads(refusal[HEADER.size :])
    assert body["exit_code"] is None and body["error"], body
    one.control(job_id, "kill")


class _Eavesdropper:
    """A stand-in task service that records every byte `xce launch` sends it: what anyone on
    the path between the job and the host sees."""

    def __init__(self) -> None:
        self.heard = b""
        self.nonces: list[bytes] = []

    def __call__(self, conn: socket.socket, session: Session | None) -> None:
        nonce = os.urandom(32)
        conn.sendall(challenge_frame(nonce))
        conn.settimeout(5)
        head = conn.recv(HEADER.size, socket.MSG_WAITALL)
        hello = conn.recv(HEADER.unpack(head)[1], socket.MSG_WAITALL)
        self.heard += head + hello
        assert HEADER.unpack(head)[0] == HELLO
        nonces = nonce + parse_hello(hello).nonce
        self.nonces.append(nonces)
        # it plays the service, so it holds the credential and proves it
        conn.sendall(ready_frame("c" * 64, nonces, "7", 0, "h1"))
        session = Session(session_key("c" * 64, nonces, "7", 0, "h1"), to_server=False)
        while True:  # the request, then input to its end (an empty STDIN frame)
            head = conn.recv(HEADER.size, socket.MSG_WAITALL)
            channel, length = HEADER.unpack(head)
            body = conn.recv(length, socket.MSG_WAITALL)
            self.heard += head + body
            if not session.open(channel, body) and channel != REQUEST:
                break
        conn.sendall(session.exit_frame(0))


def test_the_credential_never_crosses_the_wire() -> None:
    spy = _Eavesdropper()
    with _service(spy, handshake=False) as port:
        done = _launch(port, "--", "true")  # XCE_LAUNCH_CRED is "c" * 64 there
    assert done.returncode == 0, done.stderr
    assert len(spy.nonces) == 2 and b"argv" in spy.heard  # both tasks' requests were heard
    assert b"c" * 64 not in spy.heard and b"XCE_LAUNCH_CRED" not in spy.heard
    # what was sent instead: the proof for each connection's nonces, and nothing that
    # proves anything for other nonces
    for nonces in spy.nonces:
        assert proof("c" * 64, nonces, "7", 0, "h1").encode() in spy.heard


def _recv_frame(sock: socket.socket) -> tuple[int, bytes]:
    head = sock.recv(HEADER.size, socket.MSG_WAITALL)
    assert len(head) == HEADER.size, "closed"
    channel, length = HEADER.unpack(head)
    return channel, sock.recv(length, socket.MSG_WAITALL) if length else b""


class _Relay:
    """Squats a port the job's launch is told is its host's task service (as a user who
    took the port a restarted worker had), relays the handshake between the launch and the
    real service faithfully, then sends the service a request of its own, made by
    `inject` from the launch's sealed request; the launch is told exit 0."""

    def __init__(self, real: tuple[str, int], inject: Callable[[bytes], bytes]) -> None:
        self.real = real
        self.inject = inject
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.answer: tuple[int, bytes] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.server.settimeout(60)
        victim, _ = self.server.accept()
        with victim, socket.create_connection(self.real, 30) as real:
            victim.settimeout(30)
            for source, sink in ((real, victim), (victim, real), (real, victim)):
                channel, data = _recv_frame(source)  # challenge, hello, READY
                sink.sendall(frame(channel, data))
            channel, request = _recv_frame(victim)
            assert channel == REQUEST
            real.sendall(self.inject(request))
            self.answer = _recv_frame(real)
            # and the launch hears a success it did not have
            victim.sendall(frame(EXIT, json.dumps({"exit_code": 0, "signal": None}).encode()))

    def close(self) -> None:
        self.thread.join(60)
        self.server.close()


def _swap_argv(marker: Path) -> Callable[[bytes], bytes]:
    """The launch's sealed request with the attacker's argv put in, its tag kept."""

    def inject(sealed: bytes) -> bytes:
        body = json.loads(sealed[:-32])
        body["argv"] = ["/bin/sh", "-c", f"id > {marker}"]
        return frame(REQUEST, json.dumps(body).encode() + sealed[-32:])

    return inject


def _own_request(marker: Path) -> Callable[[bytes], bytes]:
    """A request of the attacker's own, unsealed (as the version before took it)."""

    def inject(sealed: bytes) -> bytes:
        body = {"argv": ["/bin/sh", "-c", f"id > {marker}"], "env": {}}
        return frame(REQUEST, json.dumps({**body, "task_id": 0, "local_task_id": 0}).encode())

    return inject


@pytest.mark.parametrize("inject", [_swap_argv, _own_request], ids=lambda i: i.__name__)
def test_a_relay_in_the_middle_cannot_run_its_own_request(
    one: Cluster, inject: Callable[[Path], Callable[[bytes], bytes]]
) -> None:
    job_id, env = _job_env(one, "relay", 2)
    marker = one.jobs_root / "pwned"
    relay = _Relay(_where(env), inject(marker))
    tasks = f"{env['XCE_EXEC_HOST']}=127.0.0.1:{relay.port}"
    done = subprocess.run(
        [sys.executable, "-m", "xce", "launch", "-n", "1", "--", "echo", "mine"],
        env={**env, "XCE_LAUNCH_TASKS": tasks, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    relay.close()
    # the service refused the request it could not check, and ran nothing
    assert relay.answer is not None and relay.answer[0] == EXIT, relay.answer
    assert "fails its check" in relay.answer[1].decode(errors="replace"), relay.answer
    assert not marker.exists()
    # and the launch did not take the relay's exit 0 for its task's
    assert done.returncode == 255, (done.returncode, done.stderr)
    assert "fails its check" in done.stderr and "Traceback" not in done.stderr, done.stderr
    one.control(job_id, "kill")


def test_one_job_holding_proven_connections_does_not_block_another_jobs_launch(
    one: Cluster,
) -> None:
    """Job 1 opens as many proven connections as it can and sends no request on any; job 2's
    launch on the same host is still accepted, as job 1 gets only its own share."""
    first, env1 = _job_env(one, "holder", 2)
    second, env2 = _job_env(one, "other", 2)
    where, host = _where(env1), env1["XCE_EXEC_HOST"]
    held: list[socket.socket] = []
    refused: list[str] = []
    try:
        for _ in range(512):  # the host's cap for all jobs together
            try:
                sock, _ = open_task(
                    where, first, int(env1["XCE_ATTEMPT"]), env1["XCE_LAUNCH_CRED"], host
                )
            except Refused as exc:
                refused.append(str(exc))
                break
            held.append(sock)
        assert refused and f"has {PER_ATTEMPT_FLOOR} tasks" in refused[0], (len(held), refused)
        sock, _ = open_task(
            _where(env2), second, int(env2["XCE_ATTEMPT"]), env2["XCE_LAUNCH_CRED"], host
        )
        sock.close()
    finally:
        for s in held:
            s.close()
    for job_id in (first, second):
        one.control(job_id, "kill")


def test_a_hello_waiting_for_its_assignment_is_not_dropped_by_idle_connections(
    one: Cluster,
) -> None:
    """A hello for an attempt not (yet) assigned here waits for it, out of the pool of
    pending connections: idle connections from its own address, many more than that pool
    keeps, do not drop it, and it gets its answer (the refusal, at the end of the wait)."""
    job_id, env = _job_env(one, "waits", 2)
    where, host = _where(env), env["XCE_EXEC_HOST"]
    with socket.create_connection(where, timeout=30) as sock:
        reader = sock.makefile("rb")
        channel, length = HEADER.unpack(reader.read(HEADER.size))
        assert channel == CHALLENGE
        nonce = read_challenge(reader.read(length))
        sock.sendall(hello_frame(env["XCE_LAUNCH_CRED"], nonce, "999999", 0, host, bytes(32)))
        idle = [socket.create_connection(where, 5) for _ in range(FLOOD // 2)]
        try:
            head = reader.read(HEADER.size)
            assert len(head) == HEADER.size, "dropped without an answer"
            channel, length = HEADER.unpack(head)
            assert channel == EXIT and json.loads(reader.read(length))["error"]
        finally:
            for s in idle:
                s.close()
    one.control(job_id, "kill")
