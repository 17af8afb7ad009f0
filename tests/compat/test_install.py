"""`xce compat install|uninstall`: symlinks to the running xce, never over a file or a
foreign link without --force; uninstall removes only links to an xce; the entry point runs
the tool a link is named after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ISOLATION
from xce.cli.compat import TOOLS, invoked_as
from xce.cli.compat.install import (
    InstallError,
    default_directory,
    install,
    path_warnings,
    points_to_xce,
    uninstall,
    xce_executable,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def xce(tmp_path: Path) -> Path:
    """An `xce` executable of this checkout (a console script, as pip makes one)."""
    path = tmp_path / "xbin" / "xce"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\nfrom xce.cli.main import run\nrun()\n")
    path.chmod(0o755)
    return path


def test_install_makes_a_link_per_tool_and_is_repeatable(tmp_path: Path, xce: Path) -> None:
    bin_dir = tmp_path / "prefix" / "bin"
    lines = install(bin_dir, xce)
    assert sorted(os.listdir(bin_dir)) == sorted(TOOLS)
    for name in TOOLS:
        link = bin_dir / name
        assert link.is_symlink() and os.readlink(link) == str(xce)
    assert len(lines) == len(TOOLS)
    again = install(bin_dir, xce)
    assert all(line.endswith("(already there)") for line in again)


def test_install_refuses_files_and_foreign_links_without_force(tmp_path: Path, xce: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho the real sbatch\n")
    real = tmp_path / "slurm-squeue"
    real.write_text("")
    (bin_dir / "squeue").symlink_to(real)
    with pytest.raises(InstallError) as exc:
        install(bin_dir, xce)
    assert str(bin_dir / "sbatch") in str(exc.value) and str(bin_dir / "squeue") in str(exc.value)
    assert "--force" in str(exc.value)
    # nothing was changed, not even the names that were free
    assert sorted(os.listdir(bin_dir)) == ["sbatch", "squeue"]
    assert (bin_dir / "sbatch").read_text().endswith("real sbatch\n")
    install(bin_dir, xce, force=True)
    assert os.readlink(bin_dir / "sbatch") == str(xce)
    assert os.readlink(bin_dir / "squeue") == str(xce)


def test_install_replaces_links_to_another_xce(tmp_path: Path, xce: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bjobs").symlink_to(tmp_path / "old" / "xce")  # an older install, now gone
    install(bin_dir, xce)
    assert os.readlink(bin_dir / "bjobs") == str(xce)


def test_install_refuses_a_directory(tmp_path: Path, xce: Path) -> None:
    (tmp_path / "bin" / "qsub").mkdir(parents=True)
    with pytest.raises(InstallError, match="is a directory"):
        install(tmp_path / "bin", xce, force=True)


def test_uninstall_removes_only_links_to_xce(tmp_path: Path, xce: Path) -> None:
    bin_dir = tmp_path / "bin"
    install(bin_dir, xce)
    (bin_dir / "qstat").unlink()
    (bin_dir / "qstat").write_text("a file of the site's")
    (bin_dir / "qdel").unlink()
    (bin_dir / "qdel").symlink_to("/usr/bin/true")
    (bin_dir / "unrelated").symlink_to(xce)
    lines = uninstall(bin_dir, xce)
    assert sorted(os.listdir(bin_dir)) == ["qdel", "qstat", "unrelated"]
    assert f"{bin_dir / 'qstat'}: left alone (not a link to xce)" in lines
    assert f"{bin_dir / 'sbatch'}: removed" in lines
    assert uninstall(tmp_path / "empty", xce) == []


def test_points_to_xce(tmp_path: Path, xce: Path) -> None:
    link = tmp_path / "l"
    link.symlink_to(xce)
    assert points_to_xce(link, xce)
    other = tmp_path / "m"
    other.symlink_to("/opt/xce-1.2/bin/xce-x86_64.AppImage")
    assert points_to_xce(other, xce)
    foreign = tmp_path / "n"
    foreign.symlink_to("/usr/bin/sbatch")
    assert not points_to_xce(foreign, xce)
    assert not points_to_xce(xce, xce)  # the file itself is no link


def test_the_executable_and_the_default_directory(tmp_path: Path, xce: Path) -> None:
    assert xce_executable(str(xce), False, sys.executable, {}) == xce.resolve()
    via_link = tmp_path / "xce-link"
    via_link.symlink_to(xce)
    assert xce_executable(str(via_link), False, sys.executable, {}) == xce.resolve()
    with pytest.raises(InstallError, match="python -m xce"):
        xce_executable(str(ROOT / "xce" / "__main__.py"), False, sys.executable, {})
    frozen = tmp_path / "dist" / "xce"
    assert xce_executable("ignored", True, str(frozen), {}) == frozen
    appimage = {"APPIMAGE": "/opt/xce.AppImage", "APPDIR": str(tmp_path / "dist")}
    assert xce_executable("x", True, str(frozen), appimage) == Path("/opt/xce.AppImage")
    assert default_directory(xce, tmp_path / "home") == xce.parent
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    if not os.access(locked, os.W_OK):  # root may write anywhere
        assert default_directory(locked / "xce", tmp_path / "home") == (
            tmp_path / "home" / ".local" / "bin"
        )


def test_path_warnings(tmp_path: Path, xce: Path) -> None:
    bin_dir = tmp_path / "bin"
    install(bin_dir, xce)
    assert "not on PATH" in path_warnings(bin_dir, "/usr/bin")[0]
    assert path_warnings(bin_dir, str(bin_dir)) == []
    first = tmp_path / "site"
    first.mkdir()
    (first / "squeue").write_text("#!/bin/sh\n")
    (first / "squeue").chmod(0o755)
    found = path_warnings(bin_dir, f"{first}{os.pathsep}{bin_dir}")
    assert found == [f"{first / 'squeue'} comes before {bin_dir / 'squeue'} on PATH"]


def test_invoked_as_reads_the_name_and_the_appimage_one() -> None:
    assert invoked_as("/usr/local/bin/squeue", {}, "/usr/bin/python3") == "squeue"
    assert invoked_as("/usr/local/bin/xce", {}, "/usr/bin/python3") is None
    assert invoked_as("xce/__main__.py", {}, "/usr/bin/python3") is None
    env = {"APPDIR": "/tmp/.mount_xceA1", "ARGV0": "/home/u/bin/bjobs"}
    assert invoked_as(
        "/tmp/.mount_xceA1/usr/lib/xce/xce", env, "/tmp/.mount_xceA1/usr/lib/xce/xce"
    ) == ("bjobs")
    # inherited by a process that does not run from that AppImage: ignored
    assert invoked_as("/usr/bin/xce", env, "/usr/bin/xce") is None


def test_compat_commands_through_the_cli(tmp_path: Path, xce: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    prefix = tmp_path / "site"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(xce), "compat", *args], capture_output=True, text=True, env=env, timeout=60
        )

    made = run("install", "--prefix", str(prefix))
    assert made.returncode == 0, made.stderr
    assert os.readlink(prefix / "bin" / "squeue") == str(xce.resolve())
    assert "is not on PATH" in made.stderr
    (prefix / "bin" / "qstat").unlink()
    (prefix / "bin" / "qstat").write_text("mine")
    refused = run("install", "--prefix", str(prefix))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert run("install", "--prefix", str(prefix), "--force").returncode == 0
    listed = run("list")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(TOOLS) + 1
    removed = run("uninstall", "--prefix", str(prefix))
    assert removed.returncode == 0 and os.listdir(prefix / "bin") == []
    via_module = subprocess.run(
        [sys.executable, "-m", "xce", "compat", "install", "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert via_module.returncode == 1 and "python -m xce" in via_module.stderr


def test_a_link_runs_its_tool_without_the_typer_tree(tmp_path: Path, xce: Path) -> None:
    """`squeue` through its link: the tool's one-line error (no controller here), and
    neither the Typer command tree (the fast path, the job commands), pydantic nor another
    family's tools were loaded."""
    install(tmp_path / "bin", xce)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\nsys.argv[0] = sys.argv.pop(1)\nfrom xce.cli.main import run\n"
        "try:\n    run()\nexcept SystemExit as e:\n    code = e.code\n"
        "heavy = [m for m in ('pydantic', 'asyncio', 'aiohttp', 'xce.cli.jobs', 'xce.cli.fast', "
        "'xce.core.state', 'xce.cli.compat.lsf') if m in sys.modules]\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "XCE_CONTROLLERS": "http://127.0.0.1:9",
        **ISOLATION,
    }
    result = subprocess.run(
        [sys.executable, str(probe), str(tmp_path / "bin" / "squeue"), "-h"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    lines = result.stderr.splitlines()
    assert lines[0].startswith("xce: error: no controller answered"), result.stderr
    assert lines[-1] == "2 []", result.stderr
    direct = subprocess.run(
        [str(tmp_path / "bin" / "bjobs"), "-frob"], capture_output=True, text=True, env=env
    )
    assert direct.returncode == 2
    assert direct.stderr == (
        "bjobs: error: option -frob is not covered by XCE's bjobs "
        "(see docs/migration.md#familiar-commands)\n"
    )
