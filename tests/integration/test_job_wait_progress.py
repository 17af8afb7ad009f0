"""`xce job wait` on an array against a real controller and worker: on a terminal (a
pseudo-terminal as its stderr) it draws the tasks done out of all, by state, while it
waits; piped, or with `--quiet`, it draws nothing and says only how the array ended."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, Cluster

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


def _env(c: Cluster) -> dict[str, str]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(c.root), "TERM": "xterm"}
    env["COLUMNS"] = "100"
    env.pop("XCE_CLIENT_CONFIG", None)
    env.pop("NO_COLOR", None)
    return env


class _Terminal:
    """`xce job wait` with a pseudo-terminal as stderr (stdout piped): what it draws there
    is collected as it comes, read by a thread until the command closes its side."""

    def __init__(self, c: Cluster, *args: str) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xce", "job", "wait", *args, "--controller", c.url],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=_env(c),
        )
        os.close(slave)
        self.master = master
        self.seen = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the command closed the terminal's other side
                return
            if not chunk:
                return
            self.seen += chunk

    def text(self) -> str:
        return ESCAPES.sub("", self.seen.decode(errors="replace"))

    def finish(self) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=60)
        self.reader.join(10)
        os.close(self.master)
        return self.proc.returncode, out.decode()


def test_wait_on_a_terminal_shows_the_arrays_tasks_done_by_state(one_worker: Cluster) -> None:
    c = one_worker
    array = c.submit(command="sleep 0.5; test $XCE_ARRAY_INDEX != 3", array="1-4", hold=True)
    term = _Terminal(c, array)
    try:
        # held: the bar is drawn while the command waits, nothing done yet
        c.wait_for(lambda: "4 PSUSP" in term.text(), 20, "the bar at 4 held")
        assert "0/4" in term.text()
        c.control(array, "resume")
        code, out = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == 1 and out == f"Job <{array}> is EXIT\n"  # task 3 exited
    assert "4/4" in term.text() and "3 DONE, 1 EXIT" in term.text()
    assert f"job {array}" in term.text()


def test_wait_piped_or_quiet_draws_nothing(one_worker: Cluster) -> None:
    c = one_worker
    array = c.submit(command="true", array="1-3")
    piped = subprocess.run(
        [sys.executable, "-m", "xce", "job", "wait", array, "--controller", c.url],
        capture_output=True,
        text=True,
        env=_env(c),
        timeout=60,
    )
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, f"Job <{array}> is DONE\n", "")
    # on a terminal, --quiet draws nothing there either
    term = _Terminal(c, array, "--quiet")
    code, out = term.finish()
    assert (code, out, term.seen) == (0, f"Job <{array}> is DONE\n", b"")
