"""The built artefacts carry the man pages: dist/man/man1 beside the binary, and the AppImage's
usr/share/man/man1, one page per visible command of this checkout.

    python -m pytest -m slow tests/e2e/test_manpages_shipped.py -q
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from xce.cli import manpages

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _expected() -> set[str]:
    return {f"{node.page}.1" for node in manpages.walk(manpages.full_tree())}


def test_binary_build_puts_the_pages_beside_it(binary: Path) -> None:
    man1 = binary.parent / "man" / "man1"
    if binary != REPO / "dist" / "xce" and not man1.is_dir():
        pytest.skip(f"XCE_BINARY={binary} has no man/man1 beside it")
    assert {p.name for p in man1.glob("*.1")} == _expected()
    assert "\\-\\-queue" in (man1 / "xce-job-submit.1").read_text()


def test_appimage_carries_the_pages(tmp_path: Path) -> None:
    image = Path(os.environ.get("XCE_APPIMAGE") or REPO / "dist" / "xce-x86_64.AppImage")
    if not image.is_file():
        pytest.skip(f"{image} not built (packaging/build-appimage)")
    subprocess.run(
        [str(image.resolve()), "--appimage-extract", "usr/share/man/man1/*"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    man1 = tmp_path / "squashfs-root" / "usr" / "share" / "man" / "man1"
    assert {p.name for p in man1.glob("*.1")} == _expected()
