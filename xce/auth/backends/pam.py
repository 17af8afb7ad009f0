"""Login with the host's own accounts through PAM (python-pam).

The PAM service (a file in /etc/pam.d) decides how passwords are checked: the default `login`
works everywhere but may add delays and securetty rules; a dedicated `/etc/pam.d/xce` holding

    auth     required pam_unix.so
    account  required pam_unix.so

checks only the local password database. pam_unix can read /etc/shadow only as root (or
through its setuid helper for the caller's own account), so the controller must run as root
for this backend. The user's groups come from the system databases (`pwd`, `grp`), so
directory-backed NSS (sssd, nslcd) works the same way.

PAM is blocking (and may sleep on failure by design), so every check runs in the backend's
own threads (`blocking_pool`), never in those the rest of the controller shares.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import os
import pwd
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pam as python_pam

from xce.auth.backends.base import BackendUnavailable, Principal, blocking_pool
from xce.auth.backends.options import Strings
from xce.config.check import Table, convert
from xce.core.validation import Invalid

log = logging.getLogger(__name__)

PAM_DIR = Path("/etc/pam.d")
# PAM's answers that mean "these credentials do not log in" (the next backend may be tried);
# anything else (a broken service file, a missing module) is the backend's fault.
_DENIED_CODES = frozenset(
    {
        python_pam.PAM_AUTH_ERR,
        python_pam.PAM_USER_UNKNOWN,
        python_pam.PAM_PERM_DENIED,
        python_pam.PAM_ACCT_EXPIRED,
        python_pam.PAM_NEW_AUTHTOK_REQD,
        python_pam.PAM_AUTHTOK_EXPIRED,
        python_pam.PAM_CRED_INSUFFICIENT,
        python_pam.PAM_MAXTRIES,
        python_pam.PAM_CRED_ERR,
    }
)
# A user name PAM and the NSS databases accept: no control characters, spaces or NULs.
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,254}\$?")


@dataclass(frozen=True)
class PamBackend:
    """Checks a password with the PAM `service` and reads the user's groups from the system."""

    service: str = "login"
    name: str = "pam"
    deny_users: frozenset[str] = frozenset({"root"})
    threads: ThreadPoolExecutor = field(
        default_factory=lambda: blocking_pool("pam"), repr=False, compare=False
    )

    async def authenticate(self, username: str, password: str) -> Principal | None:
        """The principal when PAM accepts the password (and the account), else None.

        An empty password is refused before PAM is asked: a `nullok` rule would let an
        account without a password in. Users in `deny_users` (root by default) never log in
        this way, so the API is no place to guess root's password."""
        if (
            not password
            or not _USER_NAME.fullmatch(username)
            or "\x00" in password
            or username in self.deny_users
        ):
            return None
        return await asyncio.get_running_loop().run_in_executor(
            self.threads, self._authenticate, username, password
        )

    def _authenticate(self, username: str, password: str) -> Principal | None:
        checker = python_pam.pam()
        if checker.authenticate(username, password, service=self.service):
            return Principal(user=username, groups=system_groups(username), backend=self.name)
        if checker.code in _DENIED_CODES:
            log.info("pam: %s refused for %s: %s", self.service, username, checker.reason)
            return None
        raise BackendUnavailable(
            f"PAM service {self.service!r} failed: {checker.reason} (code {checker.code})"
        )


def system_groups(username: str) -> tuple[str, ...]:
    """The names of the user's primary and supplementary groups (sorted), from NSS."""
    try:
        entry = pwd.getpwnam(username)
    except KeyError:
        return ()
    names = set()
    for gid in os.getgrouplist(username, entry.pw_gid):
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.add(str(gid))
    return tuple(sorted(names))


class PamOptions(Table, frozen=True):
    """The keys of a `type = "pam"` `[[auth.backend]]` table: the service file must exist
    in /etc/pam.d."""

    service: str = "login"
    deny_users: Strings = ("root",)
    name: str = "pam"

    def __post_init__(self) -> None:
        service = self.service
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", service) or service.startswith("."):
            raise Invalid(f"service must be a file name in {PAM_DIR}, got {service!r}")
        if not (PAM_DIR / service).is_file():
            raise Invalid(
                f"service {service!r}: {PAM_DIR / service} does not exist "
                f"(PAM would silently use the 'other' service)"
            )


def from_config(section: dict[str, Any], base: Path, where: str) -> PamBackend:
    """`{type = "pam", service = "xce"}`."""
    o = convert(section, PamOptions, where)
    return PamBackend(service=o.service, name=o.name, deny_users=frozenset(o.deny_users))
