"""Suspend, resume and kill a running attempt through its cgroup, off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import time
from typing import Any

from xce.worker.attempt.running import RunningJob
from xce.worker.cgroups import JobCgroup

log = logging.getLogger("xce.worker.executor")  # the name the log lines always had

_BACKGROUND: set[asyncio.Future[None]] = set()


def drop_cgroup(cgroup: JobCgroup | None) -> None:
    """Kill what is in `cgroup` and remove it (a task may have joined after a final kill)."""
    _drop_cgroup(cgroup)


def _drop_cgroup(cgroup: JobCgroup | None) -> None:
    if cgroup is None:
        return
    with contextlib.suppress(OSError):
        cgroup.kill()
    with contextlib.suppress(OSError):
        cgroup.remove()


def _cgroup_call(job: RunningJob, what: str, *args: Any) -> None:
    if job.cgroup is None:
        return
    try:
        getattr(job.cgroup, what)(*args)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
            log.warning("job %s: %s failed: %s", job.key[0], what, exc)


async def suspend(job: RunningJob) -> None:
    """Freeze every process of the job at once (the cgroup freezer), off the event loop: a
    job can hold a task where the freezer cannot reach it (an exec waiting on a ptrace
    attach), and the freeze then waits its whole timeout; the worker's heartbeats, and with
    them every other job's fence, must not wait with it."""
    if job.suspended_since is not None or job.killing:
        return
    job.suspended_since = time.monotonic()
    async with job.control:
        frozen = await asyncio.to_thread(_frozen, job)
    if not frozen:
        log.warning(
            "job %s: not every process froze in time (a task in an uninterruptible "
            "sleep); it is thawed when resumed or killed",
            job.key[0],
        )


def _frozen(job: RunningJob) -> bool:
    if job.cgroup is None:
        return True
    try:
        return bool(job.cgroup.freeze())
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
            log.warning("job %s: freeze failed: %s", job.key[0], exc)
        return True


async def resume(job: RunningJob) -> None:
    if job.suspended_since is None:
        return
    job.suspended_total += time.monotonic() - job.suspended_since
    job.suspended_since = None
    async with job.control:
        await asyncio.to_thread(_cgroup_call, job, "thaw")


async def kill(job: RunningJob, reason: str, grace: float) -> None:
    """SIGTERM to every process (thawed first so it can act), then the whole cgroup is
    killed after `grace` seconds if the job has not ended."""
    if job.killing:
        return
    job.killing = True
    job.kill_reason = reason
    if job.staging is not None and not job.staging.done():
        job.staging.cancel()  # not started yet: its inputs are not worth waiting for
    if job.suspended_since is not None:
        job.suspended_total += time.monotonic() - job.suspended_since
        job.suspended_since = None
    async with job.control:  # off the loop: the freezer can wait (see suspend)
        await asyncio.to_thread(_terminate, job)
    if job.result is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(job.result), grace)
    except TimeoutError:
        await asyncio.to_thread(_cgroup_call, job, "kill")


def _terminate(job: RunningJob) -> None:
    """SIGTERM to every task at once (sent while frozen, so a forking job misses none), then
    SIGCONT so that tasks the user had stopped can act on it."""
    _cgroup_call(job, "thaw")
    _cgroup_call(job, "signal_all", signal.SIGTERM)
    _cgroup_call(job, "signal", signal.SIGCONT)


def kill_group_now(job: RunningJob) -> None:
    """Kill every process of the job at once (used when the worker lost track of it)."""
    _cgroup_call(job, "kill")


def _start_kill(job: RunningJob, reason: str, grace: float) -> None:
    killer = asyncio.ensure_future(kill(job, reason, grace))
    _BACKGROUND.add(killer)
    killer.add_done_callback(_BACKGROUND.discard)
