"""A daemon refuses to start from a config file that others may change: whoever may write
it decides who runs jobs as root. Real processes, real modes and a real foreign owner
(chown needs root, as the daemons run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster

NOBODY = 65534


def _start(role: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", role, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _config(tmp_path: Path, role: str) -> tuple[Cluster, Path]:
    cluster = Cluster(tmp_path / "cluster")
    cluster.root.mkdir(parents=True)
    return cluster, cluster._config("w1" if role == "worker" else None)


@pytest.mark.parametrize("role", ["controller", "standby", "worker"])
@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_config_group_or_others_may_write_is_refused_in_one_line(
    tmp_path: Path, role: str, mode: int
) -> None:
    _, config = _config(tmp_path, role)
    config.chmod(mode)
    refused = _start(role, config)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(config) in lines[0] and f"{mode:04o}" in lines[0], lines
    assert f"chmod go-w {config}" in lines[0], lines


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_config_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    _, config = _config(tmp_path, "controller")
    config.chmod(0o644)
    os.chown(config, NOBODY, -1)
    refused = _start("controller", config)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and "chown" in lines[0], lines


def test_the_controller_starts_once_the_mode_is_fixed_as_told(tmp_path: Path) -> None:
    cluster, config = _config(tmp_path, "controller")
    config.chmod(0o666)
    assert _start("controller", config).returncode != 0
    config.chmod(0o644)  # chmod go-w, as the message says
    try:
        cluster.start_controller()  # answers /healthz
    finally:
        cluster.stop()


def test_xce_up_refuses_its_own_config_once_others_may_write_it(tmp_path: Path) -> None:
    """`xce up` adds keys to an existing xce.toml (allow_root_jobs): it checks the file
    before it changes or reads it, with the same one line."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = state / "xce.toml"
    config.write_text('[cluster]\ncontrollers = ["http://127.0.0.1:1"]\n')
    config.chmod(0o666)
    refused = subprocess.run(
        [sys.executable, "-m", "xce", "up", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and f"chmod go-w {config}" in lines[0], refused.stderr
    assert "0666" in lines[0] and "allow_root_jobs" not in config.read_text()
