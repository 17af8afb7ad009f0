"""One job attempt as the worker tracks it: its result, its state, its name."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from xce.protocol.worker import Assignment
from xce.store.files import job_dir_name
from xce.worker.attempt.fscreds import Credentials
from xce.worker.attempt.usage import UsageMeter
from xce.worker.cgroups import JobCgroup


class LaunchError(Exception):
    """The job could not be started (unknown user, refused account, bad cwd)."""


@dataclass
class JobResult:
    exit_code: int | None
    exit_signal: int | None
    reason: str
    usage: UsageMeter
    wall_time_s: float
    host_failure: bool = False


@dataclass
class RunningJob:
    """A job attempt this worker took on, keyed by (job id, attempt)."""

    assignment: Assignment  # decoded once, as the controller's answer came
    job_dir: Path
    work_dir: Path
    attempt_dir: Path | None = None
    creds: Credentials | None = None
    cgroup: JobCgroup | None = None
    keeper: int | None = None
    keeper_start: int | None = None  # its start time (with the pid, one process for ever)
    leader: int | None = None
    meter: UsageMeter = field(default_factory=UsageMeter)
    started: float = field(default_factory=time.monotonic)
    suspended_since: float | None = None
    suspended_total: float = 0.0
    kill_reason: str = ""
    killing: bool = False
    result: asyncio.Future[JobResult] | None = None
    # Read-only descriptors of the job's stdout and stderr, opened as the user when the files
    # were made: the live tail and the final upload read through them.
    readers: dict[str, int] = field(default_factory=dict)
    # Live tail: how many bytes of each stream the controller has taken (xce/worker/agent/tail.py).
    sent: dict[str, int] = field(default_factory=dict)
    # Freeze and thaw run in threads (a freeze may wait seconds for a task in an unfreezable
    # sleep), one at a time per job and in the order they were asked for.
    control: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The fetch of its inputs while it runs: a kill cancels it (a crawling transfer must not
    # hold up the end of a job that will never start).
    staging: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.assignment.job_id, self.assignment.attempt)

    @property
    def pid(self) -> int | None:
        return self.leader

    def running_seconds(self) -> float:
        now = time.monotonic()
        paused = self.suspended_total + (now - self.suspended_since if self.suspended_since else 0)
        return now - self.started - paused

    def wall_seconds(self) -> float:
        return time.monotonic() - self.started


def attempt_name(job_id: str, attempt: int) -> str:
    return f"{job_dir_name(job_id)}.{attempt}"
