"""A prompt that meets end of input (or Ctrl-C) aborts in one line, without a traceback.

`xce.cli.main.run` once caught `typer._click.exceptions.Abort`, which typer's vendored
click does not define: the `except` clause itself raised AttributeError (found by mypy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_login_prompt_at_end_of_input_aborts_in_one_line() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/nonexistent",
        "XCE_CONTROLLERS": "http://127.0.0.1:9",
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
