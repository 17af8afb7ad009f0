"""The packaging recipes at the top level stay well-formed."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.build_files import datafiles

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("nix-instantiate") is None, reason="needs Debian's nix-bin")
def test_flake_parses() -> None:
    result = subprocess.run(
        ["nix-instantiate", "--parse", str(ROOT / "flake.nix")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "nixosModules" in result.stdout
    # The module takes its units from the one copy in xce/setup/units (see xce init).
    assert "xce/setup/units" in result.stdout and "xce-worker" in result.stdout


def test_appimage_recipe_matches_the_build_script() -> None:
    """The AppImage recipe is what packaging/build-appimage builds, path for path."""
    text = (ROOT / "packaging" / "AppImageBuilder.yml").read_text()
    script = (ROOT / "packaging" / "build-appimage").read_text()
    assert "version: 1" in text and "path: ./build/AppDir" in text
    assert 'APPDIR="$ROOT/build/AppDir"' in script
    assert "exec: usr/lib/xce/xce" in text and '"$HERE/usr/lib/xce/xce"' in script
    included = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- usr/")]
    assert len(included) == 5, included
    for path in included:
        assert f'"$APPDIR/{path}' in script or f"$APPDIR/{path}" in script, path
    assert "file_name: xce-x86_64.AppImage" in text and "dist/xce-x86_64.AppImage" in script


def test_package_data_covers_every_runtime_data_file() -> None:
    """pyproject's package-data (pip installs, the flake) ships what the binary ships."""
    import tomllib

    build = datafiles()
    SUFFIXES, data_files = build.SUFFIXES, build.data_files

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["*"]
    assert sorted(patterns) == sorted(f"*{s}" for s in SUFFIXES)
    found = {p.suffix for p in data_files(ROOT)}
    assert {".capnp", ".service", ".in"} <= found, found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_units_verify(tmp_path: Path) -> None:
    """The unit templates, rendered as `xce init` renders them, pass `systemd-analyze verify`."""
    from xce.setup.templates import UNITS, render_unit

    paths = []
    for name in UNITS:
        path = tmp_path / name
        path.write_text(render_unit(name, "/bin/true", tmp_path / "xce.toml", tmp_path))
        paths.append(str(path))
    result = subprocess.run(
        ["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Unknown key" not in result.stderr and "Unknown section" not in result.stderr, (
        result.stderr
    )


def test_license_is_an_spdx_expression() -> None:
    """`project.license` as a table is deprecated by setuptools (removed after 2027-02-18):
    it is a PEP 639 SPDX string, and the build asks for a setuptools that reads it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    requires = pyproject["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    assert setuptools == ["setuptools>=77"], requires
