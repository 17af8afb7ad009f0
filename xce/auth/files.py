"""Private files for secrets and auth state: 0700 folders, 0600 files, atomic replacement.

`atomic_write` writes a temp file in the same folder, fsyncs it, renames it over the target
and fsyncs the folder, so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) 0700; tighten an existing one."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` durably; the file is created with `mode` (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
