"""Real, unprivileged Linux users and groups for tests that run as root.

Use the `linux_users` fixture (import it into a test module or a conftest):

    from tests.worker.linux_users import linux_users  # noqa: F401

    def test_x(linux_users):
        group = linux_users.group()
        alice = linux_users.user(groups=[group])
        ...

Users are made with `useradd -m` (UID_MIN and up, a home, no password) under names
`xcet<pid>x<random>` (groups `xcetg<pid>x<random>`, pid: the test process); every user and
group made is removed in teardown (`userdel -r`, `groupdel`) whatever the test did, after
killing the processes still running as that user (found by real uid in /proc; only test-made
uids). A test process that died before its teardown (killed, aborted) leaves its users behind:
the next fixture removes those whose pid no longer runs. Outside root the fixture skips.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class LinuxGroup:
    name: str
    gid: int


@dataclass(frozen=True)
class LinuxUser:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def account(self) -> pwd.struct_passwd:
        """The passwd entry, as the worker looks it up."""
        return pwd.getpwnam(self.name)


def _run(argv: list[str]) -> None:
    """Run a shadow-utils command; retried while another process holds /etc/passwd's lock."""
    for attempt in range(50):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        if "lock" not in done.stderr.lower() or attempt == 49:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        time.sleep(0.1)


def _kill_processes_of(uid: int) -> None:
    """SIGKILL every process whose real uid is `uid` (one by one, by pid)."""
    for _ in range(20):
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


_MADE = re.compile(r"^xcetg?(\d+)x[0-9a-f]{6}$")


def _orphaned(name: str) -> bool:
    """A user or group of ours whose test process is gone."""
    match = _MADE.match(name)
    return match is not None and not os.path.exists(f"/proc/{match.group(1)}")


def remove_orphans() -> None:
    """Remove the users and groups left by test processes that died before teardown."""
    for entry in pwd.getpwall():
        if _orphaned(entry.pw_name):
            _kill_processes_of(entry.pw_uid)
            with contextlib.suppress(RuntimeError):
                _run(["userdel", "-r", entry.pw_name])
    for group in grp.getgrall():
        if _orphaned(group.gr_name):
            with contextlib.suppress(RuntimeError):
                _run(["groupdel", group.gr_name])


class LinuxUsers:
    """Makes users and groups on demand; `cleanup()` removes all of them."""

    def __init__(self) -> None:
        self.users: list[LinuxUser] = []
        self.groups: list[LinuxGroup] = []

    def group(self) -> LinuxGroup:
        """A new empty group."""
        name = f"xcetg{os.getpid()}x{secrets.token_hex(3)}"
        _run(["groupadd", name])
        made = LinuxGroup(name, grp.getgrnam(name).gr_gid)
        self.groups.append(made)
        return made

    def user(self, groups: Sequence[LinuxGroup] = ()) -> LinuxUser:
        """A new user with its own primary group, a home, and the given extra groups."""
        name = f"xcet{os.getpid()}x{secrets.token_hex(3)}"
        argv = ["useradd", "-m", "-U", "-s", "/bin/sh", name]
        if groups:
            argv[1:1] = ["-G", ",".join(g.name for g in groups)]
        _run(argv)
        entry = pwd.getpwnam(name)
        made = LinuxUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
        self.users.append(made)
        return made

    def cleanup(self) -> None:
        errors = []
        for user in reversed(self.users):
            _kill_processes_of(user.uid)
            try:
                _run(["userdel", "-r", user.name])
            except RuntimeError as exc:
                # userdel -r warns (rc 12) when the mail spool is missing: still removed
                with contextlib.suppress(KeyError):
                    pwd.getpwnam(user.name)
                    errors.append(str(exc))
            # what an interrupted userdel leaves behind: the user's own group and home
            with contextlib.suppress(KeyError, RuntimeError):
                if grp.getgrnam(user.name).gr_gid == user.gid:
                    _run(["groupdel", user.name])
            with contextlib.suppress(OSError):
                if os.lstat(user.home).st_uid == user.uid:
                    shutil.rmtree(user.home)
        for group in reversed(self.groups):
            try:
                _run(["groupdel", group.name])
            except RuntimeError as exc:
                errors.append(str(exc))
        self.users, self.groups = [], []
        if errors:
            raise RuntimeError("; ".join(errors))


@pytest.fixture
def linux_users() -> Iterator[LinuxUsers]:
    """Factory of real Linux users and groups, all removed after the test (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create Linux users")
    remove_orphans()
    made = LinuxUsers()
    try:
        yield made
    finally:
        made.cleanup()
