"""The data files XCE reads at run time, found by the same rule pyproject's package-data uses.

One list serves three readers, so they cannot drift apart:
* `packaging/pyinstaller/xce.spec` puts each file into the PyInstaller archive (`spec_datas`);
* tests/e2e/test_binary_data.py checks each one is inside the built archive;
* `xce admin selfcheck` (xce/cli/selfcheck.py) loads each one from the running binary.

A new data file under a listed package with one of the listed suffixes is picked up by all
three without editing anything here.
"""

from __future__ import annotations

from pathlib import Path

# The top-level package that ships in the binary, and the suffixes of their data files. These
# match `[tool.setuptools.package-data]` in pyproject.toml (a unit test checks that).
PACKAGES = ("xce",)
SUFFIXES = (".capnp", ".tcss", ".toml", ".json", ".service", ".in")


def data_files(root: Path) -> list[Path]:
    """Every run-time data file under the packages in `root`, relative to `root`, sorted."""
    found = []
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                found.append(path.relative_to(root))
    return sorted(found)


def spec_datas(root: str | Path) -> list[tuple[str, str]]:
    """`datas` entries for PyInstaller: (source file, destination folder in the bundle)."""
    base = Path(root)
    return [(str(base / rel), str(rel.parent)) for rel in data_files(base)]
