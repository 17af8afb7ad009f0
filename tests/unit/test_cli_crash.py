"""An unexpected failure at start is one line naming a log; the traceback is in that log."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import typer

from xce.cli.crash import crashed


def _boom() -> None:
    raise KeyError("no such thing")


def _crash(what: str, dirs: list[Path | None]) -> None:
    try:
        _boom()
    except KeyError as exc:
        crashed(what, exc, dirs)


def test_the_traceback_goes_to_the_roles_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as info:
        _crash("controller", [tmp_path])
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    log = tmp_path / "controller-error.log"
    assert err.splitlines() == [
        f"xce: error: controller failed: KeyError: 'no such thing' (traceback in {log})"
    ]
    assert "Traceback" in log.read_text() and "_boom" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_without_a_state_directory_the_users_state_folder_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with pytest.raises(typer.Exit):
        _crash("worker", [None, tmp_path / "not-made-yet"])
    log = tmp_path / "state" / "xce" / "worker-error.log"
    assert f"(traceback in {log})" in capsys.readouterr().err
    assert "KeyError" in log.read_text()
    assert not (tmp_path / "not-made-yet").exists()  # a role's directory is not made for it
