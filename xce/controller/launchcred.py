"""Per-attempt launch credentials for `xce launch` (issue 15).

A job's tasks on other hosts are started by those hosts' task services
(xce/worker/tasks.py) at the request of code running inside the job, which is hostile. The
controller gives every host of an attempt's allocation the same credential in its
assignment: HMAC-SHA256 of (job id, attempt) under a key only the controller holds. The job
sees it as XCE_LAUNCH_CRED. A task service accepts a request only when the credential equals
(constant-time) the one of an attempt it is running or holding a share of right now, so:
another job's credential names another attempt; an ended attempt (or a requeued one: the
attempt number changes) is no longer assigned; a host outside the allocation has no such
attempt at all. The key lives in `<state_dir>/launch.key` (0600) so a controller restart
gives the same credentials; a standby that takes over has its own key, and running jobs
then see new credentials only on their hosts (documented limitation).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "launch.key"


def load_key(state_dir: Path | None) -> bytes:
    """The controller's launch key: read from the state dir, made there on first use."""
    if state_dir is None:
        return secrets.token_bytes(32)
    path = Path(state_dir) / KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    key = secrets.token_bytes(32)
    try:
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
