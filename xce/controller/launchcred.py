"""Per-attempt launch credentials for `xce launch`.

A job's tasks on other hosts are started by those hosts' task services
(xce/worker/tasks/service.py) at the request of code running inside the job, which is hostile. The
controller gives every host of an attempt's allocation the same credential in its
assignment: HMAC-SHA256 of (job id, attempt) under a key only the controller holds. The job
sees it as XCE_LAUNCH_CRED. A task service accepts a request only when the credential equals
(constant-time) the one of an attempt it is running or holding a share of right now, so:
another job's credential names another attempt; an ended attempt (or a requeued one: the
attempt number changes) is no longer assigned; a host outside the allocation has no such
attempt at all. The key lives in `<state_dir>/auth/launch.key` (0600), beside the signing
keys: a controller restart gives the same credentials, and the primary replicates the folder
to its standbys (xce/ha/source.py, auth files), so after a failover running jobs keep theirs.
Only a failover within a few seconds of the key's creation (the first multi-host dispatch of
the cluster) can leave a new primary without it; it then makes its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "launch.key"


def key_folder(state_dir: Path) -> Path:
    """The signing keys' folder (xce/auth/keys.py), which HA replicates to standbys."""
    from xce.auth.keys import key_dir

    return key_dir(state_dir)


def load_key(folder: Path | None) -> bytes:
    """The controller's launch key: read from `folder`, made there on first use."""
    if folder is None:
        return secrets.token_bytes(32)
    path = Path(folder) / KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    key = secrets.token_bytes(32)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        pass  # a key in memory only: credentials change at the next restart
    return key


def credential(key: bytes, job_id: str, attempt: int) -> str:
    """The credential of one attempt (hex): the same on every host of its allocation."""
    message = f"xce-launch\0{job_id}\0{attempt}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
