"""Which hosts a commit touched, and the wake-ups of the workers long-polling for them.

For `ControllerService` (xce/controller/service.py): each host has a version that goes up
whenever a committed event may change what that host runs, and a worker's long-poll
(xce/controller/workers.py) returns as soon as its host's version moves past the one it last
saw. `commit` reads `hosts_of` before and after applying each event (a job that leaves a
host touches it as much as one that arrives) and bumps each host once, except the host
whose own report the events record (`commit(told=...)`: a worker that says its attempt
ended needs no answer to learn it; at 10,000 hosts that wake-up was one request of about
four per job)."""

from __future__ import annotations

import asyncio
import contextlib

from xce.core import events as ev
from xce.core.state import ClusterState


class HostChanges:
    """Per-host versions and the long-polls waiting on them."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Event] = {}

    def bump(self, host: str) -> None:
        """A new version of `host`; its long-poll (if any) returns."""
        self.versions[host] = self.versions.get(host, 0) + 1
        waiter = self._waiters.pop(host, None)
        if waiter is not None:
            waiter.set()

    def wake_all(self) -> None:
        """Every waiting long-poll returns now (the controller steps down or stops)."""
        for host in list(self._waiters):
            self.bump(host)

    async def wait(self, host: str, version: int, timeout: float) -> None:
        """Long-poll helper: return when the host's version passes `version` or on timeout."""
        if self.versions.get(host, 0) != version:
            return
        waiter = self._waiters.setdefault(host, asyncio.Event())
        # Not wait_for: on Python 3.11 it swallows a cancellation that arrives as the
        # host changes, and a cancelled long poll would go on as if answered.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await waiter.wait()


def hosts_of(state: ClusterState, event: ev.Event) -> tuple[str, ...]:
    """The hosts whose assignments `event` may change: a job's every host (a multi-host
    job's others hold its share, xce/worker/tasks/shares.py), or the host itself. A usage
    report changes nothing a worker is told (assignments carry no usage): it wakes no one,
    or every heartbeat of a busy host would answer its poll for nothing."""
    if isinstance(event, ev.JobUsageReported):
        return ()
    if isinstance(event, ev.JobStarted):
        return tuple(p.host for p in event.hosts) or (event.host,)
    job_id = getattr(event, "job_id", None)
    if job_id is not None:
        job = state.jobs.get(job_id)
        if job is None or not job.host:
            return ()
        return tuple(p.host for p in job.allocation) or (job.host,)
    if isinstance(event, (ev.HostRegistered, ev.HostAvailable, ev.HostUnavailable)):
        return (event.name,)
    return ()
