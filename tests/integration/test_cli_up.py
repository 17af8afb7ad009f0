"""The README's first command as a new user runs it: `xce up`, then the CLI against it."""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import free_port


class Up:
    def __init__(self, root: Path, cwd: Path | None = None) -> None:
        self.root = root
        self.cwd = cwd  # where `xce up` is started (default: the test run's directory)
        self.port = free_port()
        self.env = {
            **os.environ,
            "XCE_CLIENT_CONFIG": str(root / "client.toml"),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("XCE_TOKEN", None)
        self.env.pop("XCE_CONTROLLERS", None)
        self.log = root / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-P",  # as the `xce` executable: its own directory on sys.path, not the cwd
                "-m",
                "xce",
                "up",
                "--state-dir",
                str(self.root / "state"),
                "--port",
                str(self.port),
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (
                "XCE is up" in self.log.read_text()
                and self.xce("host", "list").returncode == 0
                and "online" in self.xce("host", "list").stdout
            ):
                return
            time.sleep(0.2)
        raise AssertionError(self.log.read_text())

    def xce(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xce", *args],
            env=self.env,
            text=True,
            capture_output=True,
            timeout=60,
            input=stdin,
            cwd=self.root,  # jobs start in the submit directory: the test's, not the checkout
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(30)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    u = Up(tmp_path)
    u.start()
    try:
        yield u
    finally:
        u.stop()
        # `xce up` writes its own config (64 MiB WAL segments, preallocated); the other
        # test clusters use 1 MiB ones. Drop them so a run does not leave them behind.
        for segment in (tmp_path / "state").glob("controller/wal/*.seg"):
            segment.unlink()


def test_up_creates_private_state_and_prints_token_once(up: Up) -> None:
    state = up.root / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "admin.token").stat().st_mode) == 0o600
    token = (state / "admin.token").read_text().strip()
    assert token in up.log.read_text()
    assert token not in (state / "xce.toml").read_text()  # only its digest is stored
    # An admin user named after the caller, its password printed once; the CLI works at once.
    for name in ("users.toml", "worker.token", "controller/auth/keys.json"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
    line = next(li for li in up.log.read_text().splitlines() if "admin login (shown once)" in li)
    password = line.rsplit("password ", 1)[1]
    assert password not in (state / "users.toml").read_text()
    who = json.loads(up.xce("whoami", "--json").stdout)
    assert who["roles"] == ["admin"] and who["user"] == getpass.getuser()
    login = up.xce("login", who["user"], stdin=password + "\n")
    assert login.returncode == 0 and "roles admin" in login.stdout, login.stderr
    up.stop()
    up.log.write_text("")
    up.start()
    assert token not in up.log.read_text() and password not in up.log.read_text()
    assert "admin token:     in" in up.log.read_text()


def test_cli_runs_a_job_end_to_end(up: Up) -> None:
    submitted = up.xce("job", "submit", "--", "echo", "hello world")
    assert submitted.returncode == 0, submitted.stderr
    assert "Job <1> is submitted to queue <normal>." in submitted.stdout
    waited = up.xce("job", "wait", "1", "--timeout", "30")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert up.xce("job", "output", "1").stdout == "hello world\n"
    listing = up.xce("job", "list")
    header = listing.stdout.splitlines()[0].split()
    assert header[:8] == [
        "JOBID",
        "USER",
        "STAT",
        "QUEUE",
        "FROM_HOST",
        "EXEC_HOST",
        "JOB_NAME",
        "SUBMIT_TIME",
    ]
    data = json.loads(up.xce("job", "list", "--json").stdout)
    assert data["total"] == 1 and data["jobs"][0]["state"] == "DONE"
    hosts = json.loads(up.xce("host", "list", "--json").stdout)
    assert hosts[0]["status"] == "online"
    queues = up.xce("queue", "list")
    assert queues.stdout.split()[:3] == ["QUEUE_NAME", "PRIO", "STATUS"]

    script = up.xce("job", "submit", "--json", "-q", "short", stdin="echo from stdin\n")
    job_id = json.loads(script.stdout)["job_id"]
    assert up.xce("job", "wait", job_id, "--timeout", "30").returncode == 0
    assert up.xce("job", "output", job_id).stdout == "from stdin\n"

    failing = up.xce("job", "submit", "--", "exit 4")
    job_id = failing.stdout.split("<")[1].split(">")[0]
    assert up.xce("job", "wait", job_id, "--timeout", "30").returncode == 1
    assert json.loads(up.xce("job", "show", job_id, "--json").stdout)["exit_code"] == 4


def test_cli_errors_are_one_line_without_traceback(up: Up) -> None:
    for args, needle in [
        (("job", "show", "999"), "job 999 does not exist"),
        (("job", "submit", "--array", "5-1", "--", "true"), "ends before it starts"),
        (("job", "submit", "-q", "nope", "--", "true"), "queue 'nope' does not exist"),
        (("job", "submit", "-W", "soon", "--", "true"), "walltime"),
        (("host", "close", "nohost"), "host 'nohost' does not exist"),
        (("queue", "open", "nope"), "queue 'nope' does not exist"),
    ]:
        result = up.xce(*args)
        assert result.returncode != 0, args
        assert "Traceback" not in result.stderr, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, result.stderr)


def test_cli_without_a_controller_says_so(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XCE_CLIENT_CONFIG": str(tmp_path / "none.toml"),
        "XCE_CONTROLLERS": f"http://127.0.0.1:{free_port()}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "xce", "job", "list"],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no controller answered" in result.stderr and "Traceback" not in result.stderr


def test_a_refused_submit_takes_its_uploads_back(up: Up) -> None:
    """Unused uploads count against the user's quota: the CLI deletes them when the submit
    they were for is refused."""
    data = up.root / "data.csv"
    data.write_text("3\n1\n2\n")
    refused = up.xce("job", "submit", "-i", str(data), "-q", "nosuch", "--", "sort", "data.csv")
    assert refused.returncode != 0 and "nosuch" in refused.stderr, refused.stderr
    uploads = up.root / "state" / "controller" / "files" / "uploads"
    assert list(uploads.iterdir()) == []
    ok = up.xce("job", "submit", "--json", "-i", str(data), "--", "sort", "data.csv")
    assert ok.returncode == 0, ok.stderr
    assert list(uploads.iterdir()) == []  # used by the job: no longer an upload


def test_cli_changes_queues_at_run_time(up: Up) -> None:
    """`xce queue modify|delete`; `xce queue list` shows plugins and
    limits; bad values are one-line errors."""
    changed = up.xce(
        "queue",
        "modify",
        "short",
        "--priority",
        "60",
        "--plugins",
        "fairshare,backfill",
        "--max-slots",
        "2",
        "--max-walltime",
        "3600",
        "--users",
        f"{getpass.getuser()},@ops",
        "--shares",
        "alice=3",
    )
    assert changed.returncode == 0 and "Queue <short> is modified." in changed.stdout, (
        changed.stderr
    )
    row = next(
        line for line in up.xce("queue", "list").stdout.splitlines() if line.startswith("short")
    )
    assert "fairshare,backfill" in row and "slots<=2" in row and "wall<=3600" in row, row
    shown = json.loads(up.xce("queue", "show", "short", "--json").stdout)
    assert shown["users"] == [getpass.getuser(), "@ops"] and shown["shares"] == {"alice": 3.0}
    too_big = up.xce("job", "submit", "-q", "short", "-n", "3", "--", "true")
    assert too_big.returncode != 0 and "at most 2 per job" in too_big.stderr
    cleared = up.xce("queue", "modify", "short", "--max-slots", "none")
    assert cleared.returncode == 0
    assert json.loads(up.xce("queue", "show", "short", "--json").stdout)["max_slots"] is None
    for args, needle in [
        (("queue", "modify", "short", "--max-slots", "0"), "positive integer or none"),
        (("queue", "modify", "short"), "nothing to change"),
        (("queue", "modify", "short", "--plugins", "nosuch"), "nosuch"),
        (("queue", "delete", "normal"), "default queue"),
    ]:
        result = up.xce(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode != 0 and len(lines) == 1 and needle in lines[0], (
            args,
            result.stderr,
        )
    deleted = up.xce("queue", "delete", "short")
    assert deleted.returncode == 0 and "Queue <short> is deleted." in deleted.stdout
    assert "short" not in up.xce("queue", "list").stdout


def test_up_starts_from_a_directory_holding_an_xce_folder(tmp_path: Path) -> None:
    """`python -m` puts the working directory first on sys.path: a folder named `xce` there
    (a checkout, a project) must not replace the package in the roles `xce up` starts, nor in
    the job keepers the worker starts from that same directory."""
    project = tmp_path / "project"
    (project / "xce").mkdir(parents=True)
    (project / "xce" / "__init__.py").write_text('raise ImportError("the shadow xce")\n')
    (project / "xce" / "__main__.py").write_text('raise SystemExit("the shadow xce ran")\n')
    up = Up(tmp_path, cwd=project)
    up.start()  # raises with the log unless the controller and the worker came up
    try:
        submitted = up.xce("job", "submit", "--", "echo", "kept")
        assert submitted.returncode == 0, submitted.stderr
        waited = up.xce("job", "wait", "1", "--timeout", "30")
        assert waited.returncode == 0, waited.stdout + waited.stderr + up.log.read_text()
        assert up.xce("job", "output", "1").stdout == "kept\n"
        assert "shadow" not in up.log.read_text()
    finally:
        up.stop()
        for segment in (tmp_path / "state").glob("controller/wal/*.seg"):
            segment.unlink()


def test_a_failed_first_start_keeps_the_admin_password(tmp_path: Path) -> None:
    """The first start makes the admin; if the cluster then fails to come up (here: its port
    is taken) before the password was printed, the password waits in a 0600 file that the
    error names, and the next start prints it. Errors are lines, not tracebacks."""
    from xce.auth.passwords import verify_password

    up = Up(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", up.port))
        taken.listen()
        state = ["--state-dir", str(tmp_path / "state"), "--port", str(up.port)]
        failed = subprocess.run(
            [sys.executable, "-m", "xce", "up", *state],
            env=up.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr, failed.stderr
    kept = tmp_path / "state" / "admin.password"
    assert f"password is kept in {kept}" in failed.stderr, failed.stderr
    assert "address already in use" in failed.stderr, failed.stderr
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    password = kept.read_text().strip()
    hashed = tomllib.loads((tmp_path / "state" / "users.toml").read_text())["users"]
    assert verify_password(password, hashed[getpass.getuser()]["password"])

    up.start()
    try:
        assert f"password {password}" in up.log.read_text()
        assert not kept.exists()  # shown: the plain copy is gone
    finally:
        up.stop()
        for segment in (tmp_path / "state").glob("controller/wal/*.seg"):
            segment.unlink()
