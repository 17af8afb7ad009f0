"""Every run-time data file is inside the packaged binary, and the binary can load each one.

Two checks, because either alone can pass while the package is broken:
* the archive's table of contents (PyInstaller's CArchiveReader on dist/xce) holds every file
  `packaging/pyinstaller/datafiles.py`'s `data_files` finds in the checkout (Cap'n Proto schemas,
  Textual CSS, the config template, the systemd units), at the path the code looks it up under, plus
  pycapnp's bundled schemas and textual's metadata;
* `xce admin selfcheck`, run from the binary in a bare environment, loads each one through the
  code path that uses it (schema compile, template render + config validation, stylesheet
  parse, OpenAPI build).

    python -m pytest -m slow tests/e2e/test_binary_data.py -q
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.build_files import datafiles
from tests.conftest import ISOLATION

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _archive_names(binary: Path) -> set[str]:
    from PyInstaller.archive.readers import CArchiveReader

    return set(CArchiveReader(str(binary)).toc)


def test_every_data_file_is_in_the_archive(binary: Path) -> None:
    names = _archive_names(binary)
    expected = [str(p) for p in datafiles().data_files(REPO)]
    assert "xce/wire/xce.capnp" in expected and "xce/setup/xce.toml.in" in expected
    missing = [p for p in expected if p not in names]
    assert not missing, f"not in {binary}: {missing}"
    assert "capnp/c++.capnp" in names, sorted(n for n in names if "capnp" in n)
    assert any(n.startswith("textual-") and n.endswith(".dist-info/METADATA") for n in names)


def test_selfcheck_loads_every_file_from_the_binary(binary: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(binary), "admin", "selfcheck"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **ISOLATION},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 6 and all(line.startswith("ok") for line in lines), result.stdout
