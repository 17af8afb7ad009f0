"""The AppImage, run as a user without FUSE would: every role starts from it alone.

Takes dist/xce-x86_64.AppImage (or $XCE_APPIMAGE), building it with packaging/build-appimage
when it is missing. `--appimage-extract-and-run` (re-extracts at each start) serves the short
commands; the daemons run from one `--appimage-extract` (squashfs-root/AppRun), the way the
README tells admins without FUSE to run them. Bare environment: only PATH and HOME.

    python -m pytest -m slow tests/e2e/test_appimage.py -q     # about 1 minute (built)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ISOLATION

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def appimage() -> Path:
    if os.environ.get("XCE_APPIMAGE"):
        path = Path(os.environ["XCE_APPIMAGE"]).resolve()
        assert path.is_file(), f"XCE_APPIMAGE={path} does not exist"
        return path
    path = REPO / "dist" / "xce-x86_64.AppImage"
    if not path.exists():
        if shutil.which("mksquashfs") is None:
            pytest.skip("needs Debian's squashfs-tools to build the AppImage (.ci/run installs it)")
        subprocess.run(
            ["bash", str(REPO / "packaging" / "build-appimage")], cwd=REPO, check=True, timeout=1200
        )
    return path


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), **ISOLATION, **extra}


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _source_commands() -> set[str]:
    """The top-level commands this checkout's CLI registers (standby and tui may not yet)."""
    import typer.main

    from xce.cli.main import app

    group = typer.main.get_command(app)
    return set(group.commands)  # type: ignore[attr-defined]


def test_type2_header_and_short_commands(appimage: Path, tmp_path: Path) -> None:
    with appimage.open("rb") as f:
        head = f.read(11)
    assert head[:4] == b"\x7fELF" and head[8:11] == b"AI\x02", head
    env = _env(tmp_path)
    run = [str(appimage), "--appimage-extract-and-run"]
    version = _run([*run, "--version"], tmp_path, env)
    assert version.returncode == 0 and version.stdout.startswith("xce "), version
    helped = _run([*run, "--help"], tmp_path, env)
    assert helped.returncode == 0, helped.stderr
    for verb in ("controller", "worker", "up", "job", "admin"):
        assert verb in helped.stdout
    selfcheck = _run([*run, "admin", "selfcheck"], tmp_path, env)
    assert selfcheck.returncode == 0, selfcheck.stdout + selfcheck.stderr
    # The roles other branches add: present in this checkout => must start from the AppImage.
    for role in ("standby", "tui"):
        if role in _source_commands():
            result = _run([*run, role, "--help"], tmp_path, env)
            assert result.returncode == 0, (role, result.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def extracted(appimage: Path, tmp_path: Path) -> Path:
    result = _run([str(appimage), "--appimage-extract"], tmp_path, _env(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr
    apprun = tmp_path / "squashfs-root" / "AppRun"
    assert os.access(apprun, os.X_OK)
    return apprun


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_controller_worker_and_a_job_from_the_extracted_appimage(
    extracted: Path, tmp_path: Path, daemons: list[subprocess.Popen[bytes]]
) -> None:
    # The cluster directory comes from the AppImage's own `xce init` (CA, certificates, mTLS
    # for worker routes), so TLS from the bundled Python's ssl module is exercised too.
    port = _free_port()
    cluster = tmp_path / "cluster"
    made = _run(
        [
            str(extracted),
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
        tmp_path,
        _env(tmp_path),
    )
    assert made.returncode == 0, made.stderr
    config = cluster / "xce.toml"
    node = socket.gethostname()
    env = _env(tmp_path, XCE_CLIENT_CONFIG=str(cluster / "client.toml"))
    log = (tmp_path / "daemons.log").open("wb")
    for role in ("controller", "worker"):
        daemons.append(
            subprocess.Popen(
                [str(extracted), role, "--config", str(config)],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )
    deadline = time.monotonic() + 60
    while True:
        assert all(p.poll() is None for p in daemons), (tmp_path / "daemons.log").read_text()
        hosts = _run([str(extracted), "host", "list"], tmp_path, env)
        if any(line.split()[:2] == [node, "online"] for line in hosts.stdout.splitlines()):
            break
        assert time.monotonic() < deadline, hosts.stdout + hosts.stderr
        time.sleep(0.5)

    submitted = _run(
        [str(extracted), "job", "submit", "--", 'echo "from the appimage LD=[$LD_LIBRARY_PATH]"'],
        tmp_path,
        env,
    )
    assert submitted.returncode == 0 and "Job <1> is submitted" in submitted.stdout, submitted
    waited = _run([str(extracted), "job", "wait", "1", "--timeout", "60"], tmp_path, env)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    shown = _run([str(extracted), "job", "show", "1", "--json"], tmp_path, env)
    assert '"DONE"' in shown.stdout, shown.stdout
    output = _run([str(extracted), "job", "output", "1"], tmp_path, env)
    # The bundle's library path must not leak into jobs.
    assert output.stdout == "from the appimage LD=[]\n", output
