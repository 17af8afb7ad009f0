"""`xce tui` in a real tmux session (80x24) against a real controller: keys in with
`send-keys`, the screen read back with `capture-pane`, then a resize to 120x30."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.integration.cluster import ADMIN_TOKEN, Cluster

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (CI installs it: .ci/run)"
)


class Tmux:
    """One detached session on a private server socket (never the user's own tmux)."""

    def __init__(self, command: str, width: int = 80, height: int = 24) -> None:
        self.socket = f"xce-test-{os.getpid()}-{time.monotonic_ns()}"
        self.run("new-session", "-d", "-s", "tui", "-x", str(width), "-y", str(height), command)

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20
        )
        return out.stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.run("send-keys", "-t", "tui", key)
            time.sleep(0.15)

    def type(self, text: str) -> None:
        self.run("send-keys", "-t", "tui", "-l", text)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "tui")

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")

    def alive(self) -> bool:
        return (
            subprocess.run(
                ["tmux", "-L", self.socket, "has-session", "-t", "tui"], capture_output=True
            ).returncode
            == 0
        )

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def console(cluster: Cluster) -> Iterator[Tmux]:
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd()),
        "XCE_TOKEN": ADMIN_TOKEN,
        "HOME": os.environ.get("HOME", "/"),
        "PATH": os.environ.get("PATH", ""),
        "TERM": "xterm-256color",
        "XCE_CLIENT_CONFIG": "/nonexistent/client.toml",
    }
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # A clean environment, like a login shell's: pytest's own variables make the console
    # under test ignore terminal resizes.
    command = (
        f"env -i {assignments} {shlex.quote(sys.executable)} -m xce tui --controller {cluster.url}"
    )
    session = Tmux(command)
    try:
        yield session
    finally:
        session.kill()


def test_console_in_tmux_suspends_a_job_and_survives_a_resize(
    cluster: Cluster, console: Tmux
) -> None:
    console.wait(lambda s: "JOBID" in s and "jobs |" in s, "the jobs screen")
    job_id = cluster.submit(command="sleep 60", name="tmuxjob-with-a-long-name")
    console.wait(lambda s: "RUN" in s and "tmuxjo" in s, "the job running")
    console.run("resize-window", "-t", "tui", "-x", "120", "-y", "30")
    screen = console.wait(lambda s: "tmuxjob-with-a-long-name" in s, "the wider name column")
    assert len(screen.splitlines()) >= 29
    console.keys("/")
    console.wait(lambda s: "(Enter/Esc)" in s, "the filter box")
    console.type("name~tmuxjob")
    console.keys("Enter")
    console.wait(lambda s: "filter: name~tmuxjob" in s, "the filter applied")
    console.keys("s")
    console.wait(lambda s: f"Suspend job {job_id}?" in s, "the confirmation naming the job")
    console.keys("y")
    console.wait(lambda s: "USUSP" in s, "USUSP on screen")
    assert cluster.job(job_id)["state"] == "USUSP"

    console.keys("4")
    console.wait(
        lambda s: f"primary: {cluster.url}" in s and "REACHABLE" in s, "the cluster screen"
    )
    console.keys("q")
    deadline = time.monotonic() + 15
    while console.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not console.alive(), "q did not end the console"
    cluster.control(job_id, "kill")
