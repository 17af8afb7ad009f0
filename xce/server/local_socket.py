"""The controller's local Unix socket: opened so that no one else can stand in for it.

Why: callers on this socket are trusted to be whoever the kernel says connected
(xce/api/peer.py), so the socket itself must be the controller's. Its directory must be
owned by the controller's user and writable by no one else (otherwise another user could
remove the socket and bind their own under the same name, then read everything clients
send). The socket is 0666: every local user may connect, as themselves.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

from aiohttp import web

from xce.core.errors import XceError


class LocalSocketError(XceError):
    code = "local_socket"


def prepare(path: Path) -> None:
    """Make the socket's directory if missing (0755), check it, and remove a stale socket
    (one left by a controller that died: nothing listens on it, a controller that did hold
    the state directory lock already refused to start)."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o755, parents=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise LocalSocketError(f"local_socket: {folder} is not a directory")
    if st.st_uid != os.geteuid():
        raise LocalSocketError(
            f"local_socket: {folder} is owned by uid {st.st_uid}, not by the controller's "
            f"user (uid {os.geteuid()}): another user could replace the socket"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise LocalSocketError(
            f"local_socket: {folder} is writable by others (mode {stat.S_IMODE(st.st_mode):o}):"
            " another user could replace the socket"
        )
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise LocalSocketError(f"local_socket: {path} exists and is not a socket")
        if listening(path):
            raise LocalSocketError(f"local_socket: another controller listens on {path}")
        os.unlink(path)


def listening(path: Path) -> bool:
    """Whether a process accepts connections on the socket `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


async def start(runner: web.AppRunner, path: Path) -> web.UnixSite:
    """Listen on `path` (prepared first) and let every local user connect."""
    prepare(path)
    site = web.UnixSite(runner, str(path), shutdown_timeout=2.0)
    await site.start()
    os.chmod(path, 0o666)
    return site
