"""The packaging recipes at the top level stay well-formed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("nix-instantiate") is None, reason="needs Debian's nix-bin")
def test_flake_parses() -> None:
    result = subprocess.run(["nix-instantiate", "--parse", str(ROOT / "flake.nix")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "nixosModules" in result.stdout and "xce controller" in result.stdout


def test_appimage_recipe_names_the_binary() -> None:
    text = (ROOT / "AppImageBuilder.yml").read_text()
    assert "exec: usr/bin/xce" in text and "version: 1" in text
