"""The symlinks that make `sbatch`, `bjobs`, `qstat` & co. run XCE: which file they point
to, where they go, and the rules for what already stands there.

Why symlinks to the one executable (busybox style): nothing to keep in step with XCE's
version, and the name a command was started as is all the entry point needs
(xce/cli/main.py). An installation never replaces a file or a foreign link without
`--force` (a site's real `sbatch` must not vanish by accident), and uninstalling removes
only links that point to an `xce`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from xce.cli.compat import TOOLS


class InstallError(Exception):
    """Nothing was changed; the message says why."""


def xce_executable(argv0: str, frozen: bool, executable: str, environ: Mapping[str, str]) -> Path:
    """The running `xce`: the file the links point to. The AppImage's own file (not its
    temporary mount), the frozen binary, or the `xce` script that started Python."""
    appimage, appdir = environ.get("APPIMAGE"), environ.get("APPDIR")
    if frozen and appimage and appdir and os.path.realpath(executable).startswith(appdir):
        return Path(appimage)
    if frozen:
        return Path(os.path.realpath(executable))
    path = Path(os.path.realpath(argv0))
    if path.suffix == ".py" or not path.is_file() or not os.access(path, os.X_OK):
        raise InstallError(
            "run this as the `xce` executable (not `python -m xce`): the commands are links to it"
        )
    return path


def default_directory(target: Path, home: Path) -> Path:
    """Beside `xce` where that is writable (it is on PATH already), else ~/.local/bin."""
    if os.access(target.parent, os.W_OK):
        return target.parent
    return home / ".local" / "bin"


def points_to_xce(link: Path, target: Path) -> bool:
    """A symlink to this `xce`, or to a file named `xce*` (another installation's, or one
    since removed)."""
    if not link.is_symlink():
        return False
    if os.path.realpath(link) == os.path.realpath(target):
        return True
    return os.path.basename(os.readlink(link)).startswith("xce")


def install(
    directory: Path, target: Path, force: bool = False, names: Iterable[str] = TOOLS
) -> list[str]:
    """Make `directory/NAME -> target` for each name; the lines to print. Existing links to
    an `xce` are replaced; anything else only with `force`, else nothing is changed."""
    names = list(names)
    conflicts = []
    for name in names:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            raise InstallError(f"{path} is a directory")
        if os.path.realpath(path) == os.path.realpath(target) and not path.is_symlink():
            raise InstallError(f"{path} is the xce executable itself")
        if os.path.lexists(path) and not points_to_xce(path, target) and not force:
            conflicts.append(str(path))
    if conflicts:
        raise InstallError(
            f"{', '.join(conflicts)} already exist{'s' if len(conflicts) == 1 else ''} and "
            "not as a link to xce: nothing installed (--force replaces them)"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lines = []
        for name in names:
            path = directory / name
            if path.is_symlink() and os.readlink(path) == str(target):
                lines.append(f"{path} -> {target} (already there)")
                continue
            temporary = directory / f".{name}.xce-{os.getpid()}"
            os.symlink(target, temporary)
            os.replace(temporary, path)  # atomic: the old file is never missing
            lines.append(f"{path} -> {target}")
    except OSError as exc:
        raise InstallError(f"cannot install into {directory}: {exc.strerror or exc}") from None
    return lines


def uninstall(directory: Path, target: Path, names: Iterable[str] = TOOLS) -> list[str]:
    """Remove the links of `names` in `directory` that point to an `xce`; the lines to
    print (what was removed, what was left and why)."""
    lines = []
    for name in names:
        path = directory / name
        if not os.path.lexists(path):
            continue
        if not points_to_xce(path, target):
            lines.append(f"{path}: left alone (not a link to xce)")
            continue
        try:
            path.unlink()
        except OSError as exc:
            raise InstallError(f"cannot remove {path}: {exc.strerror or exc}") from None
        lines.append(f"{path}: removed")
    return lines


def path_warnings(directory: Path, path_env: str, names: Iterable[str] = TOOLS) -> list[str]:
    """What would keep the installed commands from being the ones a shell runs."""
    dirs = [d for d in path_env.split(os.pathsep) if d]
    if not any(os.path.realpath(d) == os.path.realpath(directory) for d in dirs):
        return [f"{directory} is not on PATH: add it, or call the commands by their path"]
    out = []
    for name in names:
        found = shutil.which(name, path=path_env)
        if found and os.path.realpath(os.path.dirname(found)) != os.path.realpath(directory):
            out.append(f"{found} comes before {directory / name} on PATH")
    return out
