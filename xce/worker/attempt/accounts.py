"""Which account a job runs as on this host, and the refusals (root, system accounts)."""

from __future__ import annotations

import os
import pwd

from xce.worker.attempt.fscreds import Credentials
from xce.worker.attempt.running import LaunchError


def account_for(user: str, allow_root: bool, min_uid: int = 1000) -> pwd.struct_passwd | None:
    """The account to run as; None means "as this worker's own user" (non-root worker).

    A root worker runs jobs only as accounts at or above `min_job_uid`, and as root only with
    `allow_root_jobs`, whoever submitted the job (the controller checks the same where it
    can resolve the name; this host's view of the uid is the one that counts)."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user} does not exist on this host") from None
    if account.pw_uid == 0:
        if not allow_root:
            raise LaunchError("jobs as root are refused on this host (worker.allow_root_jobs)")
    elif account.pw_uid < min_uid:
        raise LaunchError(
            f"user {user} (uid {account.pw_uid}) is a system account: jobs run "
            f"only as uids from {min_uid} (worker.min_job_uid)"
        )
    elif account.pw_uid in _system_uids():
        raise LaunchError(
            f"user {user} (uid {account.pw_uid}) is a system account (nobody, "
            "or systemd's dynamic users): jobs never run as it"
        )
    return account


def _system_uids() -> range | set[int]:
    """Uids above min_job_uid that are still system accounts: the kernel's overflow uid
    (nobody, 65534) and systemd's dynamic users (61184-65519)."""
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            overflow = int(f.read())
    except (OSError, ValueError):
        overflow = 65534
    return set(range(61184, 65520)) | {overflow, 65534, 4294967294, 4294967295}


def credentials(account: pwd.struct_passwd | None) -> Credentials | None:
    return None if account is None else Credentials.of(account)
