"""A prompt that meets end of input (or Ctrl-C) aborts in one line, without a traceback.

`xce.cli.main.run` once caught `typer._click.exceptions.Abort`, which typer's vendored
click does not define: the `except` clause itself raised AttributeError (found by mypy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from tests.conftest import ISOLATION

ROOT = Path(__file__).resolve().parents[2]


def test_login_prompt_at_end_of_input_aborts_in_one_line() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/nonexistent",
        "XCE_CONTROLLERS": "http://127.0.0.1:9",
        **ISOLATION,
    }
    result = subprocess.run(
        [sys.executable, "-m", "xce", "login"],  # no user given: it prompts for one
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("xce: aborted"), result.stderr


def test_a_token_that_cannot_be_saved_is_one_line_naming_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`xce login` saves its token beside the client file; where that folder cannot be
    made (here a regular file stands in its way; for a user, a site-wide folder they do
    not own), the command ends in one line naming the path and the variables that move
    it, not a traceback."""
    from xce.cli.session import save_token

    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XCE_CLIENT_CONFIG", str(tmp_path / "not-a-folder" / "client.toml"))
    with pytest.raises(typer.Exit):
        save_token("t")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("xce: error: cannot save the login token")
    assert "not-a-folder/token" in err and "XCE_SITE_CONFIG" in err
