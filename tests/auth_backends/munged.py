"""Real munged daemons for tests: each in its own folder under /tmp, with its own socket.

`munged` refuses loose permissions: the key must be 0400 and its folder private, and every
folder above the socket must be searchable by all (pytest's 0700 temporary folders are not),
so each daemon gets a 0755 folder under /tmp holding its socket and a 0700 one for its key,
seed and pid. Daemons sharing a key stand for the nodes of one cluster (a controller's and
a login node's munged); a daemon with another key is another site.

`munge_available()` says whether munged and libmunge are installed; tests skip without them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from xce.auth import munge


def munge_available() -> bool:
    if shutil.which("munged") is None:
        return False
    try:
        munge.load()
    except munge.MungeError:
        return False
    return True


def new_key(folder: Path) -> Path:
    """A fresh 1024-byte key, 0400, in a private folder of its own."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = folder / f"key-{secrets.token_hex(3)}"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    return key


class Munged:
    """One munged in the foreground (`-F`), stopped (by its pid) with `stop()`."""

    def __init__(self, key: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="xce-munged-", dir="/tmp"))
        self.root.chmod(0o755)  # users of the e2e test reach the socket through it
        private = self.root / "private"
        private.mkdir(mode=0o700)
        own_key = private / "munge.key"
        shutil.copyfile(key, own_key)
        own_key.chmod(0o400)
        self.socket = str(self.root / "munge.socket")
        self.log = private / "munged.log"
        self.process = subprocess.Popen(
            [
                "munged",
                "-F",
                f"--socket={self.socket}",
                f"--key-file={own_key}",
                f"--pid-file={private / 'munged.pid'}",
                f"--seed-file={private / 'munged.seed'}",
                f"--log-file={self.log}",
                "--num-threads=2",
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while not os.path.exists(self.socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"munged did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)
