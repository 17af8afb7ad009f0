"""The worker's end of the keeper launcher (see xce/worker/keeper/process.py).

One launcher process per worker, started once; each job attempt costs a message on a
`SOCK_SEQPACKET` socket pair (the attempt's state directory, plus its stdout, stderr and an
answer socket as `SCM_RIGHTS`) and a fork in the launcher, not a Python start-up. A launcher
that died is started again on the next launch.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

from xce.core.selfexec import python_module

log = logging.getLogger("xce.worker.launcher")
ANSWER_TIMEOUT_S = 60.0


class KeeperError(Exception):
    """The keeper could not start the job; the message says why, for the user."""


@dataclass(frozen=True)
class Started:
    keeper: int
    leader: int
    started_at: float
    keeper_start: int | None = None  # with the pid, names the keeper for ever


def keeper_command() -> list[str]:
    """How to run `xce.worker.keeper.process`: the packaged binary has it as a verb of its own."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "keeper"]
    return python_module("xce.worker.keeper.process")  # -P: the worker's cwd cannot shadow xce


class KeeperLauncher:
    def __init__(self, kind: str, parent: str, namespace: str) -> None:
        self.args = [kind, parent, namespace]
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [*keeper_command(), "serve", str(theirs.fileno()), *self.args],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                close_fds=True,
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        log.info("keeper launcher started (pid %d)", self.proc.pid)

    def close(self) -> None:
        """The launcher exits when its socket closes; keepers it forked carry on."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            self.proc = None

    def _send(self, attempt_dir: str, fds: list[int]) -> None:
        if self.sock is None or self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                log.warning(
                    "the keeper launcher exited (%s): starting it again", self.proc.returncode
                )
            self.close()
            self.start()
        assert self.sock is not None
        self.sock.sendmsg(
            [attempt_dir.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        )

    async def launch(self, attempt_dir: str, stdout: int, stderr: int) -> Started:
        """Have a keeper start the attempt; returns once the job has exec'd (or failed)."""
        answer, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                self._send(attempt_dir, [stdout, stderr, theirs.fileno()])
            except OSError:
                self.close()
                self._send(attempt_dir, [stdout, stderr, theirs.fileno()])
            theirs.close()
            answer.setblocking(False)
            loop = asyncio.get_running_loop()
            raw = await asyncio.wait_for(loop.sock_recv(answer, 65536), ANSWER_TIMEOUT_S)
        finally:
            theirs.close()
            answer.close()
        if not raw:
            raise KeeperError("the job's keeper ended before it started the job")
        body = json.loads(raw)
        if "error" in body:
            raise KeeperError(str(body["error"]))
        start = body.get("keeper_start")
        return Started(
            int(body["keeper"]),
            int(body["leader"]),
            float(body["started_at"]),
            int(start) if isinstance(start, int) else None,
        )


def keeper_alive(pid: int, start: int | None) -> bool:
    """Is `pid` still the keeper that wrote keeper.json (same pid *and* start time)?"""
    from xce.worker.keeper.process import process_start

    if start is None or process_start(pid) != start:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")  # an exited keeper nobody reaped yet is not alive


def pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None
