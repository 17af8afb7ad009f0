"""The worker's directories (state: root only; jobs: the users') and an attempt's pair."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pwd
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from xce.protocol.worker import Assignment
from xce.worker.attempt import fscreds, userfs
from xce.worker.attempt.accounts import credentials
from xce.worker.attempt.fscreds import Credentials
from xce.worker.attempt.running import RunningJob, attempt_name

log = logging.getLogger("xce.worker.executor")  # the name the log lines always had


@dataclass(frozen=True)
class Spool:
    """The worker's directories: `state` (root only) and `jobs` (the users' job dirs)."""

    root: Path
    jobs: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    def make(self) -> None:
        """Create them with the right modes; the job users may only traverse `jobs`."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.state.mkdir(exist_ok=True, mode=0o700)
        os.chmod(self.state, 0o700)
        self.jobs.mkdir(parents=True, exist_ok=True, mode=0o711)
        if os.geteuid() == 0:
            # The spool holds root's own state and the host's input cache by path: nobody
            # else may be able to swap a directory on the way to it.
            spool = Path(os.path.realpath(self.root))
            for path in (self.root, spool, *spool.parents):
                unsafe = _unsafe_for_root(path)
                if unsafe:
                    raise SpoolError(
                        f"{path} {unsafe}: another user could swap the worker's state "
                        "under it (set [worker] spool_dir to a directory only root controls)"
                    )
            real = Path(os.path.realpath(self.jobs))
            for path in (self.jobs, real, *real.parents):
                unsafe = _unsafe_for_root(path)
                if unsafe:
                    raise SpoolError(
                        f"{path} {unsafe}: another user could swap the job "
                        "directories under it (set [worker] jobs_dir to a "
                        "directory only root controls)"
                    )
            os.chmod(self.jobs, 0o711)
            blocked = [p for p in (self.jobs, *self.jobs.parents) if not os.stat(p).st_mode & 0o001]
            if blocked:
                log.warning(
                    "jobs of users other than root cannot reach their directories: "
                    "%s is not searchable by others (set [worker] jobs_dir)",
                    blocked[0],
                )


class SpoolError(Exception):
    """The worker's directories are not safe to run jobs in; the message says why."""


def _unsafe_for_root(path: Path) -> str:
    """Why root must not trust `path` (like sshd's StrictModes), or "" if it may: owned by
    root, and writable by nobody else unless sticky (then others cannot rename what root
    owns in it, as in /tmp)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if st.st_uid != 0:
        return f"belongs to uid {st.st_uid}, not root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return "is writable by group or others"
    return ""


async def remove_job_dir(job_dir: Path, creds: Credentials | None) -> None:
    """Empty a job directory as its user (symlinks are removed, never followed), then
    remove the directory itself (root may: its parent is the worker's)."""
    try:
        await fscreds.as_user(creds, userfs.remove_tree, str(job_dir))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("cannot empty %s: %s", job_dir, exc)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(job_dir)


def _owner_credentials(path: Path) -> Credentials | None:
    """The credentials of a directory's owner (to clean up a leftover as that user)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if os.geteuid() != 0 or st.st_uid == 0:
        return None
    try:
        return Credentials.of(pwd.getpwuid(st.st_uid))
    except KeyError:
        return Credentials(st.st_uid, st.st_gid, (), str(st.st_uid))


async def prepare(spool: Spool, a: Assignment, account: pwd.struct_passwd | None) -> RunningJob:
    """The attempt's state directory (root) and job directory (the user's, 0700)."""
    name = attempt_name(a.job_id, a.attempt)
    attempt_dir = spool.state / name
    if attempt_dir.exists():
        shutil.rmtree(attempt_dir)  # a start that never got as far as its keeper
    attempt_dir.mkdir(mode=0o700)
    job_dir = spool.jobs / name
    if os.path.lexists(job_dir):
        await remove_job_dir(job_dir, _owner_credentials(job_dir))
    os.mkdir(job_dir, 0o700)
    if account is not None:
        os.chown(job_dir, account.pw_uid, account.pw_gid, follow_symlinks=False)
    return RunningJob(a, job_dir, working_directory(a, job_dir), attempt_dir, credentials(account))


def working_directory(a: Assignment, job_dir: Path) -> Path:
    """Where the job starts: the cwd it gave, else the directory it was submitted from (as
    sbatch and bsub do), else its own directory. A job that stages files in starts where
    they were put, its own directory, unless it gave a cwd."""
    if a.cwd:
        return Path(a.cwd)
    if a.submit_dir and not a.inputs:
        return Path(a.submit_dir)
    return job_dir
