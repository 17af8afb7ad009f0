"""Paths in the config file: relative to the file's folder, `~` for the home, the same for
every key that names a file (the token files read them as the directories do)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from xce.config.loader import parse_config
from xce.config.settings import Config


@pytest.mark.parametrize(
    ("table", "key", "read"),
    [
        ("worker", "token_file", lambda c: c.worker.token),
        ("controller", "replication_token_file", lambda c: c.controller.replication_token),
    ],
)
def test_token_files_expand_the_home(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    key: str,
    read: Callable[[Config], str],
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "token").write_text("s3cret\n")
    (home / "token").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    text = f'[{table}]\n{key} = "~/token"\n'
    config = parse_config(tomllib.loads(text), tmp_path / "etc" / "xce.toml")
    assert read(config) == "s3cret"


def test_token_files_are_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    (tmp_path / "token").chmod(0o600)
    config = parse_config(tomllib.loads('[worker]\ntoken_file = "token"'), tmp_path / "xce.toml")
    assert config.worker.token == "abc"
