"""Shared fixtures of the packaged-artefact tests: the built `xce` binary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def binary() -> Path:
    if os.environ.get("XCE_BINARY"):
        path = Path(os.environ["XCE_BINARY"]).resolve()
        assert path.is_file(), f"XCE_BINARY={path} does not exist"
        return path
    path = REPO / "dist" / "xce"
    if not path.exists():
        subprocess.run(
            ["bash", str(REPO / "packaging" / "build-binary")], cwd=REPO, check=True, timeout=900
        )
    assert os.access(path, os.X_OK)
    return path
