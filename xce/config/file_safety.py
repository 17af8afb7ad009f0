"""StrictModes: secrets and state others can touch are refused, naming the fix.

Like sshd's StrictModes, the controller checks, before it reads or writes anything, that
every secret and state path it uses belongs to it and is closed to other users, and refuses
to start otherwise, naming the file and the command that fixes it. Quietly tightening the
mode instead would hide that the secret may already have been read (a signing key readable
by others can mint admin tokens) or the state already changed (a writable `users.toml` can
give anyone an admin password).

Three kinds of path:

* `STATE_DIR`: folders XCE writes (the state directory, its WAL and file folders): owned by
  the controller's user, not writable by group or others.
* `PRIVATE`: secrets XCE writes itself, 0600/0700 from creation (the signing keys and their
  folder, `keys.json`, `revocations.json`, `users.toml`): owned by the controller's user,
  no access at all for group or others.
* `OPERATOR_SECRET`: secrets an operator provides (the TLS key, client secrets of login
  backends): owned by the controller's user or root, not readable by others and not
  writable by group or others (a group-readable key, as with Debian's ssl-cert group, is
  allowed).

* `CONFIG`: the cluster config a daemon starts from: owned by the daemon's user or root, not
  writable by group or others. Whoever may change it decides who runs jobs as root
  (`allow_root_jobs`), which CA is trusted and where the state lives; reading it is harmless
  (secrets live in files of their own, checked as `OPERATOR_SECRET`).

Each path's folder must not be writable by others either (unless sticky, like /tmp): whoever
may write the folder may replace the file. Paths that do not exist yet are skipped: XCE
creates them private.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

from xce.core.errors import XceError

STATE_DIR = "state directory"
PRIVATE = "private file"
OPERATOR_SECRET = "secret"
CONFIG = "config file"


class UnsafeFiles(XceError):
    """A secret or state path others may read or change; the controller does not start."""

    code = "unsafe_files"
    http_status = 500


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner_problem(path: Path, st: os.stat_result, kind: str, euid: int) -> str | None:
    allowed = {euid, 0} if kind in (OPERATOR_SECRET, CONFIG) else {euid}
    if st.st_uid in allowed:
        return None
    return (
        f"{path} belongs to {_user(st.st_uid)}, not to {_user(euid)} that runs the "
        f"controller; run chown {_name(euid)} {path}"
    )


def _mode_problem(path: Path, st: os.stat_result, kind: str) -> str | None:
    mode = stat.S_IMODE(st.st_mode)
    is_dir = stat.S_ISDIR(st.st_mode)
    if kind == PRIVATE:
        bad, fixed = mode & 0o077, (0o700 if is_dir else 0o600)
        what = "group or others may access it"
    elif kind == OPERATOR_SECRET:
        bad, fixed = mode & 0o027, mode & ~0o027
        what = "others may read it, or group or others may change it"
    else:
        bad, fixed = mode & 0o022, mode & ~0o022
        what = "group or others may write to it"
    if bad and kind == CONFIG:
        return (
            f"config {path} is writable by group or others (mode {mode:04o}): they could "
            f"make jobs run as root; run chmod go-w {path}"
        )
    if not bad:
        return None
    return f"{path} is not private ({what}: mode {mode:04o}); run chmod {fixed:o} {path}"


def _folder_problem(path: Path) -> str | None:
    """The folder holding `path`: others who may write it may replace the file."""
    folder = path.parent
    try:
        st = folder.stat()
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return (
            f"{folder}, which holds {path.name}, is writable by group or others (mode "
            f"{mode:04o}): they could replace {path.name}; run chmod go-w {folder}"
        )
    return None


def problems(paths: Iterable[tuple[Path, str]], euid: int | None = None) -> list[str]:
    """What is wrong with each existing path of `paths` ((path, kind) pairs), in order."""
    euid = os.geteuid() if euid is None else euid
    found: list[str] = []
    for path, kind in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            found.append(f"{path}: {exc.strerror}")
            continue
        for problem in (
            _owner_problem(path, st, kind, euid),
            _mode_problem(path, st, kind),
            _folder_problem(path),
        ):
            if problem is not None and problem not in found:
                found.append(problem)
    return found


def check_config(path: Path) -> None:
    """Refuse to start a daemon from a config file others may change (`CONFIG`), before a
    line of it is believed; one line, naming the file, its mode and the fix."""
    check([(path, CONFIG)])


def check(paths: Iterable[tuple[Path, str]]) -> None:
    """Raise `UnsafeFiles` naming every problem of `paths`, each with its fix."""
    found = problems(paths)
    if found:
        more = f" (and {len(found) - 1} more: " + "; ".join(found[1:]) + ")" if found[1:] else ""
        raise UnsafeFiles(f"refusing to start: {found[0]}{more}")
