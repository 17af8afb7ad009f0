"""The packaged single-file binary, run as a user would: no Python, no repo, no environment.

Builds `dist/xce` with `packaging/build-binary` if it is missing (or takes `XCE_BINARY`), then
runs it from a temporary directory outside the repository with only `PATH` and `HOME` set:
`--help`, `xce up` in the background, a job round trip (every submit is encoded into the WAL
with the bundled Cap'n Proto schema), `xce admin wal-check` (decodes it all again), and a
Ctrl-C that must take the controller and worker down with it, unpack directories included.

    python -m pytest -m slow tests/e2e -q
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import ISOLATION

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Box:
    """A bare user environment around the binary: cwd and HOME in a temp dir, no venv."""

    def __init__(self, binary: Path, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "XCE_CLIENT_CONFIG": str(root / "client.toml"),
            **ISOLATION,
        }

    def xce(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            cwd=self.root,
            env=self.env,
            text=True,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture
def box(binary: Path, tmp_path: Path) -> Box:
    assert REPO not in tmp_path.parents
    return Box(binary, tmp_path)


def test_help_runs_without_python_or_repo(box: Box) -> None:
    result = box.xce("--help")
    assert result.returncode == 0, result.stderr
    for verb in ("controller", "worker", "up", "job", "queue", "host", "admin"):
        assert verb in result.stdout
    sub = box.xce("job", "submit", "--help")
    assert sub.returncode == 0 and "--array" in sub.stdout, sub.stderr


def drop_wal_segments(state: Path) -> None:
    """`xce up` and `xce init` write 64 MiB preallocated WAL segments (the product default):
    remove them once the test is done, so runs do not fill the temp directory."""
    for segment in state.glob("controller/wal/*.seg"):
        segment.unlink()


class Up:
    def __init__(self, box: Box) -> None:
        self.box = box
        self.state = box.root / "state"
        self.port = _free_port()
        self.log = box.root / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.box.binary),
                    "up",
                    "--state-dir",
                    str(self.state),
                    "--port",
                    str(self.port),
                ],
                cwd=self.box.root,
                env=self.box.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            if "XCE is up" in self.log.read_text():
                hosts = self.box.xce("host", "list")
                if hosts.returncode == 0 and "online" in hosts.stdout:
                    self._check_socket()
                    return
            time.sleep(0.3)
        raise AssertionError("xce up did not come up:\n" + self.log.read_text())

    def _check_socket(self) -> None:
        """As root, `xce up` listens on a local socket: this run's own, never the
        machine's /run/xce/xce.sock."""
        if os.geteuid() == 0:
            config = (self.state / "xce.toml").read_text()
            assert f'local_socket = "{ISOLATION["XCE_SOCKET"]}"' in config, config

    def processes(self) -> list[psutil.Process]:
        assert self.proc is not None
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                for p in reversed(self.processes()):
                    p.kill()
                raise


@pytest.fixture
def up(box: Box) -> Iterator[Up]:
    u = Up(box)
    u.start()
    try:
        yield u
    finally:
        u.stop()
        drop_wal_segments(u.state)


def _unpack_dir(p: psutil.Process) -> str | None:
    try:
        return p.environ().get("_PYI_APPLICATION_HOME_DIR")
    except psutil.Error:
        return None


def test_up_runs_a_job_and_stops_on_ctrl_c(box: Box, up: Up) -> None:
    submitted = box.xce("job", "submit", "--", "echo", "hello")
    assert submitted.returncode == 0, submitted.stderr
    assert "Job <1> is submitted" in submitted.stdout
    waited = box.xce("job", "wait", "1", "--timeout", "60")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    output = box.xce("job", "output", "1")
    assert output.returncode == 0, output.stderr
    assert output.stdout == "hello\n"

    # The bootloader's LD_LIBRARY_PATH (pointing into an unpack dir) must not reach jobs.
    env_job = box.xce(
        "job", "submit", "--", 'echo "LD=[$LD_LIBRARY_PATH] PYI=[$_PYI_ARCHIVE_FILE]"'
    )
    assert env_job.returncode == 0, env_job.stderr
    assert box.xce("job", "wait", "2", "--timeout", "60").returncode == 0
    assert box.xce("job", "output", "2").stdout == "LD=[] PYI=[]\n"

    # xce up, its controller and worker, each a bootloader plus its Python process.
    procs = up.processes()
    cmdlines = [" ".join(p.cmdline()) for p in procs]
    assert any(" controller " in c for c in cmdlines), cmdlines
    assert any(" worker " in c for c in cmdlines), cmdlines
    unpacked = {d for d in map(_unpack_dir, procs) if d}
    assert len(unpacked) >= 3, unpacked  # every role unpacked its own copy

    assert up.proc is not None
    up.proc.send_signal(signal.SIGINT)
    assert up.proc.wait(30) == 0, up.log.read_text()
    _gone, alive = psutil.wait_procs(procs, timeout=15)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    log = up.log.read_text()
    assert "stopping XCE" in log and "controller stopped cleanly" in log, log
    assert "Traceback" not in log, log
    leftover = [d for d in unpacked if Path(d).exists()]
    assert not leftover, leftover

    # Offline, the same binary decodes the checkpoint and every WAL record it wrote.
    check = box.xce("admin", "wal-check", "--state-dir", str(up.state / "controller"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok, 2 jobs" in check.stdout and check.stdout.rstrip().endswith("ok"), check.stdout


def test_readme_install_copy_init_up(box: Box, tmp_path: Path) -> None:
    """The README's Install section as a new user follows it: copy the one file somewhere
    on their own, `xce init` a cluster directory, `xce up` it, run a job over TLS."""
    import re
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    xce = bin_dir / "xce"
    shutil.copy2(box.binary, xce)
    port = _free_port()
    cluster = tmp_path / "cluster"
    made = subprocess.run(
        [
            str(xce),
            "init",
            str(cluster),
            "--host",
            "127.0.0.1",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--allow-root-jobs",
        ],
        cwd=tmp_path,
        env=box.env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert re.search(r"shown only this once.*\n\s+\S{20,}", made.stdout), made.stdout
    unit = (cluster / "systemd" / "xce-controller.service").read_text()
    assert f"ExecStart={xce} controller --config {cluster / 'xce.toml'}" in unit

    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(
        [str(xce), "up", "--state-dir", str(cluster)],
        cwd=tmp_path,
        env=box.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert up.poll() is None, (tmp_path / "up.log").read_text()
            hosts = subprocess.run(
                [str(xce), "host", "list"],
                cwd=tmp_path,
                env=box.env,
                text=True,
                capture_output=True,
                timeout=60,
            )
            if hosts.returncode == 0 and " online " in hosts.stdout:
                break
            assert time.monotonic() < deadline, hosts.stderr + (tmp_path / "up.log").read_text()
            time.sleep(0.5)
        client = (Path(box.env["XCE_CLIENT_CONFIG"])).read_text()
        assert "https://127.0.0.1" in client and "ca_file" in client
        run = [str(xce), "job", "submit", "--", "echo installed"]
        submitted = subprocess.run(
            run, cwd=tmp_path, env=box.env, text=True, capture_output=True, timeout=60
        )
        assert submitted.returncode == 0, submitted.stderr
        for args in (["job", "wait", "1", "--timeout", "60"], ["job", "output", "1"]):
            result = subprocess.run(
                [str(xce), *args],
                cwd=tmp_path,
                env=box.env,
                text=True,
                capture_output=True,
                timeout=90,
            )
            assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout == "installed\n"
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
        drop_wal_segments(cluster)
