"""Job control: stop / resume / requeue / kill / modify of a job, a task or a whole array.

`JobActions` decides which events an action on a job means, from the job's state and the
lifecycle rules (xce/core/lifecycle.py), and commits them through the service it is given. A
requeue of a job on an unreachable host waits for the host's fence (`service.fence_until`),
so a job never runs twice."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from xce.controller.modify import modify_events
from xce.core import events as ev
from xce.core import lifecycle
from xce.core.errors import Conflict, Forbidden, InvalidRequest
from xce.core.file_owners import inputs_spent
from xce.core.model import HostStatus, JobRecord, JobState
from xce.core.state_base import parse_job_id

if TYPE_CHECKING:
    from xce.controller.service import ControllerService

JOB_ACTIONS = ("stop", "resume", "requeue", "kill")


def _clock_text(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


class JobActions:
    """The events of a job action, committed through `service`."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service

    def _job_events(self, job: JobRecord, action: str, now: float) -> list[ev.Event]:
        if action == "kill":
            if job.state.active:
                host = self.service.state.hosts.get(job.host or "")
                if host is None or host.status is HostStatus.UNAVAILABLE:
                    return [ev.JobKilled(now, job.id, "killed (host unavailable)")]
                if job.kill_requested and not job.requeue_requested:
                    return []
                return [ev.JobKillRequested(now, job.id)]
            lifecycle.check(job.id, "kill", job.state, JobState.EXIT)
            return [ev.JobKilled(now, job.id)]
        if action == "stop":
            lifecycle.check(job.id, "suspend", job.state)
            return [ev.JobSuspended(now, job.id)]
        if action == "resume":
            lifecycle.check(job.id, "resume", job.state)
            return [ev.JobResumed(now, job.id)]
        if action == "requeue":
            lifecycle.check(job.id, "requeue", job.state, JobState.PEND)
            if job.spec.inputs and inputs_spent(self.service.state, job.number):
                raise Conflict(
                    f"cannot requeue job {job.id}: it was killed before it started and its "
                    "input files were deleted then; submit it again"
                )
            until = self.service.fence_until(job.host) if job.host else None
            if until is not None:
                raise Conflict(
                    f"job {job.id} may still be running on host {job.host}, which is "
                    f"unreachable: it can be requeued from {_clock_text(until)} (heartbeat "
                    f"deadline + [controller] fence_timeout_s), when its worker has killed it"
                )
            if job.state.active:
                # Stays where it is until its worker reports the attempt ended (killed):
                # only then does it wait for a host again, so it never runs twice.
                if job.requeue_requested:
                    return []
                return [ev.JobKillRequested(now, job.id, requeue=True)]
            return [ev.JobRequeued(now, job.id)]
        raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")

    def _array_events(self, number: int, action: str, now: float) -> list[ev.Event]:
        array = self.service.state.array(number)
        out: list[ev.Event] = []
        tasks = self.service.state.tasks_of(number)
        states: tuple[JobState, ...]
        if action == "kill":
            if array.pending:
                out.append(ev.ArrayCancelled(now, number))
            states = (JobState.PEND, JobState.PSUSP, JobState.RUN, JobState.USUSP, JobState.SSUSP)
        elif action == "stop":
            if array.pending and not array.held:
                out.append(ev.ArrayHeld(now, number))
            states = (JobState.PEND, JobState.RUN, JobState.SSUSP)
        elif action == "resume":
            if array.held:
                out.append(ev.ArrayReleased(now, number))
            states = (JobState.PSUSP, JobState.USUSP, JobState.SSUSP)
        elif action == "requeue":
            states = (JobState.RUN, JobState.USUSP, JobState.SSUSP, JobState.DONE, JobState.EXIT)
        else:
            raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")
        for task in tasks:
            if task.state in states:
                out.extend(self._job_events(task, action, now))
        if not out:
            raise Conflict(f"no task of job array {number} is in a state that allows {action}")
        return out

    async def control(self, job_id: str, action: str, owner: str | None = None) -> list[str]:
        """stop / resume / requeue / kill one job, one task, or a whole array.

        With `owner` set (a plain user), only that user's jobs may be touched.
        """
        if action not in JOB_ACTIONS:
            raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")
        number, index = parse_job_id(job_id)
        now = self.service.clock()
        if index is None and number in self.service.state.arrays:
            user = self.service.state.arrays[number].spec.user
            events = self._array_events(number, action, now) if owner in (None, user) else []
        else:
            job = self.service.state.job(job_id)
            user = job.spec.user
            events = self._job_events(job, action, now) if owner in (None, user) else []
        if owner is not None and owner != user:
            raise Forbidden(f"{owner} may not {action} job {job_id} of user {user}")
        await self.service.commit(events)
        return sorted({getattr(e, "job_id", str(getattr(e, "number", ""))) for e in events})

    async def modify(
        self,
        job_id: str,
        changes: dict[str, object],
        privileged: bool,
        may_view_owner: Callable[[str], bool] | None = None,
        defer: bool = False,
    ) -> list[ev.Event]:
        """`xce job modify`: validated and committed as events (xce/controller/modify.py);
        nothing awaits between the checks and the commit."""
        service = self.service
        events = modify_events(service, job_id, dict(changes), privileged, may_view_owner, defer)
        await service.commit(events)
        return events
