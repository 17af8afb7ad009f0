"""The handlers of job lifecycle events: submit, start, suspend, resume, kill, requeue,
host loss, finish, preemption and usage reports (`ClusterState.apply` dispatches to them).

Each validates its event completely before it writes anything (`lifecycle.check` for the
transition), then writes one record through the index keeper. `JobEvents` is made with the
state's data and its index keeper, and binds what its handlers read at construction (a
start, a finish is one handler call and no attribute hop more than a method of the state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from xce.core import eligibility, gres, lifecycle
from xce.core import events as ev
from xce.core.allocation import check_allocation
from xce.core.errors import Conflict, InvalidRequest, NotFound
from xce.core.fastreplace import replacer
from xce.core.model import ArrayRecord, HostRecord, JobRecord, JobState
from xce.core.state_base import StateData
from xce.core.state_index import IndexKeeper

replace = dataclasses.replace


def _started(
    job: JobRecord,
    host: str,
    at: float,
    devices: tuple[str, ...],
    eligible: float,
    allocation: tuple,
) -> JobRecord:
    """The record of a job that starts at `at` on `host`: its previous attempt's outcome
    cleared. One generated constructor call (`replacer`), as a start happens per job."""
    return _START(
        job,
        _RUN,
        host,
        at,
        None,
        None,
        None,
        "",
        None,
        False,
        devices,
        eligible,
        "",
        at,
        allocation,
    )


_RUN = JobState.RUN
_START = replacer(
    JobRecord,
    "state",
    "host",
    "start_time",
    "end_time",
    "exit_code",
    "exit_signal",
    "reason",
    "usage",
    "kill_requested",
    "devices",
    "eligible_time",
    "preempted_by",
    "resumed_time",
    "allocation",
)
# The record of a job that ends: state, end_time, exit_code, exit_signal, usage, reason,
# outputs, host_usage, output_problems.
_finished = replacer(
    JobRecord,
    "state",
    "end_time",
    "exit_code",
    "exit_signal",
    "usage",
    "reason",
    "outputs",
    "host_usage",
    "output_problems",
)


def with_output_problems(reason: str, problems: tuple[str, ...]) -> str:
    """The reason of an attempt some of whose outputs were not returned: the reason it
    ended for (if any), then how many outputs are missing and the first one's problem."""
    if not problems:
        return reason
    count = len(problems)
    note = f"{count} output{'s' if count > 1 else ''} not returned: {problems[0][:300]}"
    if count > 1:
        note += f" (and {count - 1} more: xce job show)"
    return f"{reason}; {note}" if reason else note


class JobEvents:
    """What happens to one job (or one task of an array) over its life."""

    def __init__(self, data: StateData, keeper: IndexKeeper) -> None:
        self._data = data
        self._keeper = keeper
        self.jobs = data.jobs
        self.arrays = data.arrays
        self.hosts = data.hosts
        self.queues = data.queues
        self.host_load = data.host_load
        self.submit_keys = data.submit_keys
        self.pending_arrays = data.pending_arrays
        self.job = data.job
        self.host = data.host
        self.queue = data.queue
        self._put_job = keeper.put_job
        self._store = keeper.store
        self._materialise = keeper.materialise

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> the bound method that applies it."""
        return {
            ev.JobSubmitted: self._job_submitted,
            ev.ArraySubmitted: self._array_submitted,
            ev.JobStarted: self._job_started,
            ev.JobSuspended: self._job_suspended,
            ev.JobResumed: self._job_resumed,
            ev.JobKillRequested: self._job_kill_requested,
            ev.JobKilled: self._job_killed,
            ev.JobRequeued: self._job_requeued,
            ev.JobHostLost: self._job_host_lost,
            ev.JobFinished: self._job_finished,
            ev.JobUsageReported: self._job_usage,
            ev.JobPreempted: self._job_preempted,
            ev.JobNumbersReserved: self._numbers_reserved,
        }

    def _take_number(self, number: int, queue: str) -> None:
        data = self._data
        if number != data.next_number:
            raise Conflict(f"job number {number} is out of order (next is {data.next_number})")
        if data.number_ceiling and number > data.number_ceiling:
            raise Conflict(
                f"job number {number} is not reserved (reserved up to {data.number_ceiling})"
            )
        self.queue(queue)
        data.next_number += 1

    def _numbers_reserved(self, e: ev.JobNumbersReserved) -> None:
        data = self._data
        if e.first < data.next_number or e.last < e.first or e.last <= data.number_ceiling:
            raise Conflict(
                f"cannot reserve job numbers {e.first}..{e.last}: the next is "
                f"{data.next_number}, reserved up to {data.number_ceiling}"
            )
        data.next_number = e.first
        data.number_ceiling = e.last

    def _job_submitted(self, e: ev.JobSubmitted) -> None:
        self._take_number(e.number, e.spec.queue)
        state = JobState.PSUSP if e.spec.hold else JobState.PEND
        eligible = None if e.spec.hold else eligibility.eligible_from(self._keeper, e.spec, e.at)
        self._put_job(
            None,
            JobRecord(
                str(e.number),
                e.number,
                e.spec,
                state,
                e.at,
                submit_key=e.key,
                eligible_time=eligible,
            ),
        )

    def _array_submitted(self, e: ev.ArraySubmitted) -> None:
        if not e.indices:
            raise InvalidRequest("a job array needs at least one index")
        self._take_number(e.number, e.spec.queue)
        self.arrays[e.number] = ArrayRecord(
            e.number,
            e.spec,
            e.indices,
            e.indices,
            e.at,
            e.max_concurrent,
            held=e.spec.hold,
            submit_key=e.key,
            eligible_time=None
            if e.spec.hold
            else eligibility.eligible_from(self._keeper, e.spec, e.at),
        )
        eligibility.watch_array(self._keeper, self.arrays[e.number])
        if e.key:
            self.submit_keys[(e.spec.user, e.key)] = str(e.number)
        self.pending_arrays[e.number] = None

    def _job_started(self, e: ev.JobStarted) -> None:
        stored, job = self._materialise(e.job_id)
        lifecycle.check(e.job_id, "start", job.state, JobState.RUN)
        host = self.host(e.host)
        if e.devices:
            self._check_grant(e.job_id, e.host, e.devices, host)
        if e.hosts:
            check_allocation(job, e.host, e.hosts)
            for k, part in enumerate(e.hosts):
                other = self.host(part.host)
                if k and part.devices:  # every other host's own grant (`--gpus` per host)
                    self._check_grant(e.job_id, part.host, part.devices, other)
        allocation = (
            e.hosts if len(e.hosts) > 1 or (e.hosts and e.hosts[0].slots != job.spec.slots) else ()
        )
        # eligible by the time it started at the latest (a dependency whose target was
        # requeued after it ended, a start the scheduler did not plan)
        eligible = e.at if job.eligible_time is None else job.eligible_time
        self._store(stored, _started(job, e.host, e.at, e.devices, eligible, allocation))

    def _check_grant(
        self, job_id: str, host_name: str, devices: tuple[str, ...], host: HostRecord
    ) -> None:
        """Granted devices must exist on the host and be held by no other active job."""
        have = gres.host_devices(host.gres)
        load = self.host_load.get(host_name)
        held = load.devices if load is not None else frozenset()
        for name in devices:
            kind, device = gres.split_grant(name)
            if device not in have.get(kind, ()):
                raise InvalidRequest(f"job {job_id}: host {host_name} has no device {name}")
            if name in held:
                raise Conflict(f"job {job_id}: device {name} of host {host_name} is in use")

    def _job_suspended(self, e: ev.JobSuspended) -> None:
        stored, job = self._materialise(e.job_id)
        action = "system_suspend" if e.by_system else "suspend"
        lifecycle.check(e.job_id, action, job.state)
        target = {
            JobState.PEND: JobState.PSUSP,
            JobState.RUN: JobState.SSUSP if e.by_system else JobState.USUSP,
            JobState.SSUSP: JobState.USUSP,
        }[job.state]
        # A hold ends eligibility: the wait counts again from the release.
        eligible = None if target is JobState.PSUSP else job.eligible_time
        self._store(stored, replace(job, state=target, eligible_time=eligible))

    def _job_resumed(self, e: ev.JobResumed) -> None:
        stored, job = self._materialise(e.job_id)
        lifecycle.check(e.job_id, "resume", job.state)
        target = JobState.PEND if job.state is JobState.PSUSP else JobState.RUN
        eligible = (
            eligibility.eligible_from(self._keeper, job.spec, e.at)
            if job.state is JobState.PSUSP
            else job.eligible_time
        )
        if job.preempted_by and job.state in (JobState.SSUSP, JobState.USUSP):
            # The victim of a preemption takes its slots back: it needs them free again.
            host = self.hosts.get(job.host or "")
            load = self.host_load.get(job.host or "")
            used = load.slots if load else 0
            if host is not None and used + job.spec.slots > host.slots:
                raise Conflict(
                    f"cannot resume job {e.job_id}: host {host.name} has "
                    f"{host.slots - used} free slots, it needs {job.spec.slots}"
                )
            self._store(
                stored,
                replace(
                    job,
                    state=target,
                    preempted_by="",
                    reason="",
                    resumed_time=e.at,
                    eligible_time=eligible,
                ),
            )
            return
        self._store(stored, replace(job, state=target, eligible_time=eligible))

    def _job_kill_requested(self, e: ev.JobKillRequested) -> None:
        stored, job = self._materialise(e.job_id)
        lifecycle.check(e.job_id, "kill", job.state, job.state)
        if e.requeue:
            lifecycle.check(e.job_id, "requeue", job.state, JobState.PEND)
        # The latest request decides: a kill after a requeue ends the job, not its attempt.
        self._store(stored, replace(job, kill_requested=True, requeue_requested=e.requeue))

    def _job_killed(self, e: ev.JobKilled) -> None:
        stored, job = self._materialise(e.job_id)
        lifecycle.check(e.job_id, "kill", job.state, JobState.EXIT)
        self._store(stored, replace(job, state=JobState.EXIT, end_time=e.at, reason=e.reason))

    def _job_requeued(self, e: ev.JobRequeued) -> None:
        stored, job = self._materialise(e.job_id)
        lifecycle.check(e.job_id, "requeue", job.state, JobState.PEND)
        if stored is None:
            raise Conflict(f"cannot requeue job {e.job_id}: it was killed before it started")
        if job.spec.queue not in self.queues:
            raise Conflict(
                f"cannot requeue job {e.job_id}: its queue {job.spec.queue!r} has been deleted"
            )
        reason = e.reason
        if job.preempted_by and reason == "requeued":
            reason = f"requeued: preempted by job {job.preempted_by}"
        self._store(stored, self._requeued(job, reason))

    def _requeued(self, job: JobRecord, reason: str) -> JobRecord:
        """The job's next attempt, pending; eligible again from the requeue (or later)."""
        return replace(
            job,
            state=JobState.PEND,
            attempt=job.attempt + 1,
            host=None,
            start_time=None,
            end_time=None,
            exit_code=None,
            exit_signal=None,
            reason=reason,
            usage=None,
            kill_requested=False,
            outputs=(),
            requeue_requested=False,
            allocation=(),
            eligible_time=eligibility.eligible_from(self._keeper, job.spec, self._data.at),
            host_usage=(),
            output_problems=(),
        )

    def _job_host_lost(self, e: ev.JobHostLost) -> None:
        stored, job = self._materialise(e.job_id)
        target = JobState.PEND if e.requeue else JobState.EXIT
        lifecycle.check(e.job_id, "host_lost", job.state, target)
        reason = f"host {e.host or job.host} became unavailable"
        if e.requeue:
            new = self._requeued(job, reason)
        else:
            new = replace(job, state=JobState.EXIT, end_time=e.at, reason=reason)
        self._store(stored, new)

    def _job_finished(self, e: ev.JobFinished) -> None:
        stored, job = self._materialise(e.job_id)
        if job.attempt != e.attempt:
            raise Conflict(f"job {e.job_id}: report for attempt {e.attempt}, now {job.attempt}")
        ok = e.exit_code == 0 and e.exit_signal is None and not job.kill_requested and not e.reason
        target = JobState.DONE if ok else JobState.EXIT
        lifecycle.check(e.job_id, "finish", job.state, target)
        # Outputs not returned do not make the job's own run a failure (its program's exit
        # decides DONE or EXIT), but they are never silent: the reason names them.
        reason = e.reason or ("killed" if job.kill_requested else "")
        self._store(
            stored,
            _finished(
                job,
                target,
                e.at,
                e.exit_code,
                e.exit_signal,
                e.usage or job.usage,
                with_output_problems(reason, e.output_problems),
                e.outputs,
                e.host_usage,
                e.output_problems,
            ),
        )

    def _job_preempted(self, e: ev.JobPreempted) -> None:
        stored, job = self._materialise(e.job_id)
        if stored is None or job.state is not JobState.RUN:
            raise Conflict(
                f"cannot preempt job {e.job_id}: it is {job.state.value} (only a "
                "running job can be)"
            )
        self.job(e.by)
        reason = f"preempted by job {e.by}"
        if e.requeue:
            lifecycle.check(e.job_id, "requeue", job.state, JobState.PEND)
            new = replace(
                job, kill_requested=True, requeue_requested=True, preempted_by=e.by, reason=reason
            )
        else:
            lifecycle.check(e.job_id, "system_suspend", job.state, JobState.SSUSP)
            new = replace(job, state=JobState.SSUSP, preempted_by=e.by, reason=reason)
        self._store(stored, new)

    def _job_usage(self, e: ev.JobUsageReported) -> None:
        job = self.jobs.get(e.job_id)
        if job is None:
            raise NotFound(f"job {e.job_id} does not exist")
        if job.attempt != e.attempt or not job.state.active:
            raise Conflict(f"job {e.job_id}: usage for an attempt that is not running")
        self._put_job(job, replace(job, usage=e.usage))
