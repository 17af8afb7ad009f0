"""The tests' clients see none of the machine's client settings (tests/conftest.py).

A machine that ran `xce up` or `xce init` before the tests has a `~/.config/xce/client.toml`
naming its controllers and CA file; a client the tests start must not read it, or a command
aimed at a test cluster over http:// fails loading a CA file that has since gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import CLIENT_VARIABLES, TEST_HOME
from xce.cli.common import client_config_path, client_settings
from xce.config.ports import DEFAULT_PORT


def test_the_home_and_client_file_are_this_runs_own() -> None:
    assert os.environ["HOME"] == TEST_HOME == str(Path.home())
    assert client_config_path() == Path(TEST_HOME) / ".config" / "xce" / "client.toml"
    assert not [name for name in CLIENT_VARIABLES if name in os.environ]


def test_a_client_started_by_a_test_has_only_the_defaults() -> None:
    settings = client_settings()
    assert settings.controllers == [f"http://127.0.0.1:{DEFAULT_PORT}"]
    assert settings.token is None and settings.ca_file is None and not settings.insecure
    shown = subprocess.run(
        [sys.executable, "-c", "import pathlib; print(pathlib.Path.home())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == TEST_HOME
