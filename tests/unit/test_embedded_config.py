"""`xce up`'s config: the controller allows root jobs exactly where the worker does."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from xce.cli import embedded
from xce.config.loader import parse_config


@pytest.mark.parametrize("euid, allowed", [(0, True), (1000, False)])
def test_up_config_allows_root_jobs_on_both_roles_only_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, euid: int, allowed: bool
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    (tmp_path / "worker.token").write_text("t\n")
    (tmp_path / "worker.token").chmod(0o600)  # xce up writes it private; others are refused
    data = tomllib.loads(embedded._config_text(tmp_path, 7000))
    config = parse_config(data, tmp_path / "xce.toml")
    assert config.controller.allow_root_jobs is allowed
    assert config.worker.allow_root_jobs is allowed
    assert config.controller.min_job_uid == 1000


def test_an_older_up_config_run_as_root_gets_the_controller_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    old = embedded._config_text(tmp_path, 7000).replace(
        "allow_root_jobs = true\n\n[auth]", "\n[auth]", 1
    )
    path = tmp_path / "xce.toml"
    path.write_text(old)
    assert "allow_root_jobs" not in tomllib.loads(old)["controller"]
    embedded._upgrade_config(path)
    data = tomllib.loads(path.read_text())
    assert data["controller"]["allow_root_jobs"] is True
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    before = path.read_text()
    embedded._upgrade_config(path)  # once only
    assert path.read_text() == before


def test_an_older_up_config_without_root_jobs_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    text = embedded._config_text(tmp_path, 7000).replace(
        "allow_root_jobs = false\n\n[auth]", "\n[auth]", 1
    )
    path = tmp_path / "xce.toml"
    path.write_text(text)
    embedded._upgrade_config(path)
    assert path.read_text() == text
