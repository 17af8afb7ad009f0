"""The jobs' own `xce` (for `xce launch`): this worker's version, installed in a directory
only root controls inside the jobs root.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
from pathlib import Path

import xce

log = logging.getLogger("xce.worker.tasks")


# The jobs' `xce` directory inside the jobs root: job directories are named by job id
# (digits), so a dot name never meets one, and only root may create entries there.
LAUNCHER_DIR = ".xce-bin"


def _own_dir(path: Path) -> None:
    """Make `path` a real directory of root's, 0755: a symlink there, or a directory someone
    else owns or may write (planted while the jobs root was writable, restored from a
    backup), is moved aside, never followed or written into, since every job runs the `xce`
    it holds. The parent (the jobs root) is root's, so nothing can swap it back meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and (
        not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022
    ):
        aside = path.with_name(f"{path.name}.untrusted-{os.getpid()}-{int(st.st_ino)}")
        os.rename(path, aside)  # a rename moves the link itself, not its target
        log.warning("moved the untrusted %s aside to %s", path, aside)
        st = None
    if st is None:
        os.mkdir(path, 0o755)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


def install_launcher(bin_dir: Path) -> str:
    """Put this worker's own `xce` in `bin_dir` (root's, 0755) and return the directory:
    jobs get it first on PATH so `xce launch` is the worker's version whatever the job's
    install. A frozen worker links its binary; otherwise a script runs this interpreter on
    this package. Empty when it cannot be made (jobs then use whatever `xce` they find)."""
    try:
        _own_dir(bin_dir)
        target = bin_dir / "xce"
        temp = bin_dir / ".xce.new"
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        if getattr(sys, "frozen", False):
            os.symlink(sys.executable, temp)
        else:
            package_parent = str(Path(xce.__file__).resolve().parent.parent)
            text = (
                f"#!{sys.executable}\n"
                "import sys\n"
                f"sys.path.insert(0, {package_parent!r})\n"
                "from xce.cli.main import run\n"
                "run()\n"
            )
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        os.replace(temp, target)
        return str(bin_dir)
    except OSError as exc:
        log.warning("cannot install the jobs' xce launcher in %s: %s", bin_dir, exc)
        return ""
