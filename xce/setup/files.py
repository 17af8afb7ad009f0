"""Writing the secrets of a cluster directory: 0700 folders, 0600 files, never briefly wider."""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) 0700; tighten an existing one."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, created 0600 (an existing file is tightened, then replaced)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
