"""Callers on the controller's local socket are who the kernel says they are.

Why: Slurm and LSF users never log in to the scheduler; the machine vouches for their Unix
identity. On the controller's own host (the embedded cluster, a login node that runs the
controller) the kernel does it: a Unix socket's peer credentials (`SO_PEERCRED`) give the uid
and gid of the process that connected, which that process cannot choose. The uid's name and
groups (NSS: `pwd`, `os.getgrouplist`) become the identity, with the roles the users file and
`[auth.groups]` give it, else `user`; root and the controller's own user are `admin` (they can
read the controller's keys anyway). A request that carries a bearer token is the token's,
not the socket's: the socket only stands in for a missing token.
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
import time
from dataclasses import dataclass

from aiohttp import web

from xce.api.http import Identity
from xce.auth.accounts import group_names, with_configured
from xce.auth.runtime import AuthRuntime
from xce.core.errors import Unauthorized

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CACHE_S = 30.0  # how long a uid's names and groups are reused (NSS can be slow: LDAP, sssd)


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


_PEER = web.RequestKey("peer_credentials", object)


def peer_credentials(request: web.Request) -> PeerCredentials | None:
    """The connecting process's credentials when the request came over a Unix socket, else
    None (TCP). Read once per request."""
    if _PEER in request:
        found = request[_PEER]
        return found if isinstance(found, PeerCredentials) else None
    creds = request[_PEER] = _read(request)
    return creds


def _read(request: web.Request) -> PeerCredentials | None:
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid, gid)


class PeerIdentities:
    """uid -> Identity, rebuilt after `_CACHE_S` so group changes are seen soon."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[float, Identity]] = {}

    def identity(self, runtime: AuthRuntime, creds: PeerCredentials) -> Identity:
        now = time.monotonic()
        hit = self._memo.get(creds.uid)
        if hit is not None and now - hit[0] < _CACHE_S:
            return hit[1]
        who = _build(runtime, creds)
        if len(self._memo) > 10_000:
            self._memo.clear()
        self._memo[creds.uid] = (now, who)
        return who


def _build(runtime: AuthRuntime, creds: PeerCredentials) -> Identity:
    try:
        account = pwd.getpwuid(creds.uid)
    except KeyError:
        raise Unauthorized(f"uid {creds.uid} has no user name on the controller's host") from None
    groups, direct = with_configured(runtime.backends, account.pw_name, group_names(account))
    runtime.directory.remember(account.pw_name, groups)  # for group-scoped job access
    if creds.uid in (0, os.geteuid()):
        roles: tuple[str, ...] = ("admin",)
    else:
        roles = runtime.roles.roles_for(groups, direct)
    return Identity(account.pw_name, groups, roles, runtime.permissions(roles), "user")


PEERS = web.AppKey("peer_identities", PeerIdentities)
