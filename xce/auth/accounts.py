"""Identities that the host vouches for: a Unix account's groups, plus what the users file
says of its name.

Two ways in take the operating system's word for who the caller is: the controller's local
socket (the kernel's peer credentials, xce/api/peer.py) and MUNGE (munged's, xce/auth/
backends/munge.py). Both then name the caller the same way, from the account database
(NSS: files, sssd, LDAP), so a user is one identity whichever way they came in.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Iterable
from typing import Any


def group_names(account: pwd.struct_passwd) -> list[str]:
    """The names of the account's primary and supplementary groups, in the system's order.

    `os.getgrouplist` rather than scanning `grp.getgrall()`, which misses directory groups
    when sssd does not enumerate; a gid without a name is left out, as no rule can name it."""
    names = []
    for gid in os.getgrouplist(account.pw_name, account.pw_gid):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def with_configured(
    backends: Iterable[Any], user: str, os_groups: Iterable[str]
) -> tuple[tuple[str, ...], list[str]]:
    """(groups, direct roles) of a host-vouched user: its OS groups, then the groups that the
    configured backends keeping such lists (the users file) give the name, each once, and the
    roles they give it, so an admin can grant roles to an account that never logs in with a
    password."""
    names = dict.fromkeys(os_groups)
    roles: list[str] = []
    for backend in backends:
        if (roles_of := getattr(backend, "roles_of", None)) is not None:
            roles.extend(roles_of(user))
        if (groups_of := getattr(backend, "groups_of", None)) is not None:
            names.update(dict.fromkeys(groups_of(user)))
    return tuple(names), roles
