"""The console on a cluster made by `xce init` (https:// with its own CA).

`xce tui` must connect with exactly the CLI's client settings: the CA file and token of the
cluster's client.toml. Real processes on 127.0.0.1: `xce init`, its controller and worker;
the console headless (Textual's pilot) and `xce tui` itself in a tmux pane.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_init import InitCluster, _free_port, small_wal, xce
from tests.tui.helpers import screen_text, until
from xce.cli.common import client_settings
from xce.cli.tui_cmd import console_app
from xce.console.app import XceTui


@pytest.fixture(scope="module")
def init_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InitCluster]:
    root = tmp_path_factory.mktemp("tls-console")
    made = xce(
        "init",
        str(root / "cluster"),
        "--host",
        "127.0.0.1",
        "--listen",
        "127.0.0.1",
        "--port",
        str(_free_port()),
        "--allow-root-jobs",
    )
    assert made.returncode == 0, made.stderr
    c = InitCluster(
        root,
        root / "cluster",
        made.stdout,
        {"XCE_CLIENT_CONFIG": str(root / "cluster" / "client.toml")},
    )
    small_wal(c.dir / "xce.toml")
    try:
        c.start("controller", c.dir / "xce.toml", "controller")
        c.start("worker", c.dir / "xce.toml", "worker")
        deadline = time.monotonic() + 60
        while c.cli("host", "list").returncode != 0:
            assert time.monotonic() < deadline, c.logs()
            time.sleep(0.3)
        yield c
    finally:
        for p in c.procs:
            p.terminate()
        for p in c.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


async def test_console_uses_the_clis_ca_file_and_token(
    init_cluster: InitCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("XCE_TOKEN", "XCE_CONTROLLERS", "XCE_CA_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XCE_CLIENT_CONFIG", init_cluster.env["XCE_CLIENT_CONFIG"])
    settings = client_settings()
    assert settings.controllers[0].startswith("https://") and settings.ca_file is not None
    name = f"tls-{uuid.uuid4().hex[:6]}"
    assert init_cluster.cli("job", "submit", "-J", name, "--hold", "true").returncode == 0

    app = console_app(settings)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected over https")
        await until(pilot, lambda: name in screen_text(pilot), "the held job on screen")
        await until(pilot, lambda: len(app.hosts) >= 1, "the worker's host")

    # Without the CLI's settings (the old `xce tui`) the cluster CA is unknown: no data.
    bare = XceTui(settings.controllers, settings.token)
    async with bare.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: "reconnecting" in bare.connection, "the TLS refusal")
        assert not bare.jobs.rows


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_xce_tui_in_tmux_shows_the_tls_clusters_jobs(
    init_cluster: InitCluster, tmp_path: Path
) -> None:
    name = f"tmux-{uuid.uuid4().hex[:6]}"
    assert init_cluster.cli("job", "submit", "-J", name, "--hold", "true").returncode == 0
    session = f"xce-tui-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **init_cluster.env, "TERM": "xterm-256color"}
    for key in ("XCE_TOKEN", "XCE_CONTROLLERS", "XCE_CA_FILE"):
        env.pop(key, None)
    command = f"{sys.executable} -m xce tui"
    subprocess.run(
        [
            "tmux",
            "-L",
            session,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "140",
            "-y",
            "40",
            command,
        ],
        env=env,
        check=True,
    )
    try:
        deadline = time.monotonic() + 60
        pane = ""
        while time.monotonic() < deadline:
            pane = subprocess.run(
                ["tmux", "-L", session, "capture-pane", "-p", "-t", session],
                capture_output=True,
                text=True,
            ).stdout
            if name in pane:
                break
            time.sleep(0.3)
        assert name in pane, pane
        assert "reconnecting" not in pane and "refused" not in pane, pane
    finally:
        subprocess.run(["tmux", "-L", session, "kill-server"], capture_output=True)
