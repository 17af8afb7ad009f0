"""The handlers of everything else an administrator or a user changes: queues, hosts,
advance reservations, a job's modification, array holds and cancels, and retention
(`purgeable` chooses, a `JobsPurged` event drops). `AdminEvents` is made with the state's
data and its index keeper."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from xce.core import eligibility
from xce.core import events as ev
from xce.core.errors import Conflict, InvalidRequest, NotFound
from xce.core.model import HostAdmin, HostRecord, JobSpec, JobState
from xce.core.reservations import check_reservation
from xce.core.state_base import StateData, parse_job_id
from xce.core.state_index import IndexKeeper

replace = dataclasses.replace


def _waiting_terms(spec: JobSpec) -> tuple:
    """What a job's eligibility depends on besides holds: its dependency and begin time."""
    return (spec.dependency, spec.begin_time)


def _still_eligible(before: float | None, now_from: float | None, at: float) -> float | None:
    """A job eligible before a modify and still eligible at once keeps its time (its wait
    goes on); one that must now wait (a dependency, a later begin) gets the new answer."""
    if before is not None and now_from == at:
        return before
    return now_from


class AdminEvents:
    """Queues, hosts, reservations, modifications, array holds, purges."""

    def __init__(self, data: StateData, keeper: IndexKeeper) -> None:
        self._data = data
        self._keeper = keeper
        self.jobs = data.jobs
        self.arrays = data.arrays
        self.queues = data.queues
        self.hosts = data.hosts
        self.reservations = data.reservations
        self.pending_arrays = data.pending_arrays
        self.array_tasks = data.array_tasks
        self.finished_jobs = data.finished_jobs
        self.waiting_on_deps = data.waiting_on_deps
        self.counts = data.counts
        self.job = data.job
        self.queue = data.queue
        self.host = data.host
        self.array = data.array
        self.tasks_of = data.tasks_of
        self.live_jobs_in = data.live_jobs_in
        self._put_job = keeper.put_job
        self._forget_key = keeper.forget_key

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> the method that applies it."""
        return {
            ev.QueueCreated: self._queue_created,
            ev.QueueOpened: lambda e: self._queue_set(e.name, open=True),
            ev.QueueClosed: lambda e: self._queue_set(e.name, open=False),
            ev.QueueActivated: lambda e: self._queue_set(e.name, active=True),
            ev.QueueDeactivated: lambda e: self._queue_set(e.name, active=False),
            ev.QueueModified: self._queue_modified,
            ev.QueueDeleted: self._queue_deleted,
            ev.HostRegistered: self._host_registered,
            ev.HostOpened: lambda e: self._host_set(e, admin=HostAdmin.OPEN, admin_reason=""),
            ev.HostClosed: lambda e: self._host_set(
                e, admin=HostAdmin.CLOSED, admin_reason=e.reason
            ),
            ev.HostDrainStarted: lambda e: self._host_set(
                e, admin=HostAdmin.DRAINING, admin_reason=e.reason
            ),
            ev.HostUnavailable: lambda e: self._host_set(e, reachable=False),
            ev.HostAvailable: lambda e: self._host_set(e, reachable=True),
            ev.ReservationAdded: self._reservation_added,
            ev.ReservationDeleted: self._reservation_deleted,
            ev.JobModified: self._job_modified,
            ev.ArrayHeld: lambda e: self._array_hold(e.number, True),
            ev.ArrayReleased: lambda e: self._array_hold(e.number, False),
            ev.ArrayCancelled: self._array_cancelled,
            ev.JobsPurged: self._jobs_purged,
        }

    def _queue_created(self, e: ev.QueueCreated) -> None:
        if e.queue.name in self.queues:
            raise Conflict(f"queue {e.queue.name!r} already exists")
        self.queues[e.queue.name] = e.queue

    def _queue_modified(self, e: ev.QueueModified) -> None:
        old = self.queue(e.queue.name)
        self.queues[old.name] = replace(e.queue, open=old.open, active=old.active)

    def _queue_deleted(self, e: ev.QueueDeleted) -> None:
        self.queue(e.name)
        live = self.live_jobs_in(e.name)
        if live:
            raise Conflict(
                f"queue {e.name!r} still has {live} pending, running or suspended "
                "jobs: delete it once they have ended"
            )
        del self.queues[e.name]

    def _queue_set(self, name: str, **changes: bool) -> None:
        self.queues[name] = replace(self.queue(name), **changes)

    def _host_registered(self, e: ev.HostRegistered) -> None:
        old = self.hosts.get(e.name)
        if old is None:
            self.hosts[e.name] = HostRecord(
                e.name,
                e.slots,
                e.memory_mb,
                e.attributes,
                registered_at=e.at,
                changed_at=e.at,
                gres=e.gres,
            )
        else:
            self.hosts[e.name] = replace(
                old,
                slots=e.slots,
                memory_mb=e.memory_mb,
                attributes=e.attributes,
                reachable=True,
                registered_at=e.at,
                changed_at=e.at,
                gres=e.gres,
            )

    def _host_set(self, e: Any, **changes: Any) -> None:
        self.hosts[e.name] = replace(self.host(e.name), changed_at=e.at, **changes)

    def _reservation_added(self, e: ev.ReservationAdded) -> None:
        check_reservation(e.reservation, self.reservations)
        self.reservations[e.reservation.name] = e.reservation

    def _reservation_deleted(self, e: ev.ReservationDeleted) -> None:
        if e.name not in self.reservations:
            raise NotFound(f"reservation {e.name!r} does not exist")
        del self.reservations[e.name]

    def _job_modified(self, e: ev.JobModified) -> None:
        keeper = self._keeper
        number, index = parse_job_id(e.job_id)
        self.queue(e.spec.queue)
        if index is None and number in self.arrays:
            array = self.arrays[number]
            if e.spec.user != array.spec.user:
                raise InvalidRequest("a job's owner cannot change")
            if not array.pending:
                raise Conflict(f"job array {number} has no task left to start: nothing to modify")
            # a new dependency or begin time: eligible anew (xce/core/eligibility.py)
            eligible = array.eligible_time
            if _waiting_terms(array.spec) != _waiting_terms(e.spec):
                eligible = (
                    None
                    if array.held
                    else _still_eligible(
                        array.eligible_time, eligibility.eligible_from(keeper, e.spec, e.at), e.at
                    )
                )
            if array.spec.dependency:
                eligibility.watch(keeper, str(number), array.spec, False)
            self.arrays[number] = replace(array, spec=e.spec, eligible_time=eligible)
            eligibility.watch_array(keeper, self.arrays[number])
            return
        stored = self.jobs.get(e.job_id)
        if stored is None:
            self.job(e.job_id)  # NotFound for a job that does not exist
            raise Conflict(f"task {e.job_id} has not started: modify the whole array {number}")
        if e.spec.user != stored.spec.user:
            raise InvalidRequest("a job's owner cannot change")
        if stored.state.finished:
            raise Conflict(f"cannot modify job {e.job_id}: it is {stored.state.value}")
        if (
            stored.state.active
            and replace(e.spec, name=stored.spec.name, walltime_s=stored.spec.walltime_s)
            != stored.spec
        ):
            raise Conflict(
                f"job {e.job_id} is {stored.state.value}: only its name and walltime can change"
            )
        new = replace(stored, spec=e.spec)
        if stored.state is JobState.PEND and _waiting_terms(stored.spec) != _waiting_terms(e.spec):
            new = replace(
                new,
                eligible_time=_still_eligible(
                    stored.eligible_time, eligibility.eligible_from(keeper, e.spec, e.at), e.at
                ),
            )
        # the dependency index follows the new terms: drop the old registration, then
        # register the new one if the job still waits (both idempotent)
        if stored.spec.dependency and stored.eligible_time is None:
            eligibility.watch(keeper, stored.id, stored.spec, False)
        if not e.spec.dependency:
            self.waiting_on_deps.pop(stored.id, None)
        self._put_job(stored, new)
        if new.spec.dependency and new.eligible_time is None and not new.state.finished:
            eligibility.watch(keeper, new.id, new.spec, True)

    def _array_hold(self, number: int, held: bool) -> None:
        array = self.array(number)
        if held == array.held:
            return
        keeper = self._keeper
        eligible = None if held else eligibility.eligible_from(keeper, array.spec, self._data.at)
        self.arrays[number] = replace(array, held=held, eligible_time=eligible)
        eligibility.watch_array(keeper, self.arrays[number])

    def _array_cancelled(self, e: ev.ArrayCancelled) -> None:
        array = self.array(e.number)
        count = len(array.pending)
        self.arrays[e.number] = replace(
            array, pending=type(array.pending)(), exited=array.exited + count
        )
        self.pending_arrays.pop(e.number, None)
        eligibility.watch_array(self._keeper, self.arrays[e.number])
        if count:
            eligibility.tasks_cancelled(self._keeper, e.number)

    def purgeable(self, cutoff: float) -> list[str]:
        """Retention: the finished plain jobs and whole arrays that ended before `cutoff`.

        Only a choice: the primary writes it as a `JobsPurged` event, which is what drops
        them, everywhere at the same point of the log.
        """
        # A finished job that a waiting job still depends on stays: purging it would turn
        # "satisfied later" into "never satisfiable".
        # Both loops walk indexes, not every job, to keep the checkpoint's pause short.
        referenced: set[int] = set()
        for spec in [self.jobs[j].spec for j in self.waiting_on_deps] + [
            a.spec for a in self.arrays.values() if a.spec.dependency and not a.finished
        ]:
            referenced.update(parse_job_id(t.job)[0] for t in spec.dependency)
        ids: list[str] = []
        for job_id in self.finished_jobs:
            job = self.jobs[job_id]
            if job.number not in referenced and job.end_time is not None and job.end_time < cutoff:
                ids.append(job_id)
        for number, array in self.arrays.items():
            if not array.finished or number in referenced:
                continue
            tasks = self.tasks_of(number)
            if all(t.end_time is not None and t.end_time < cutoff for t in tasks) and (
                tasks or array.submit_time < cutoff
            ):
                ids.append(str(number))
        return ids

    def _jobs_purged(self, e: ev.JobsPurged) -> None:
        """Drop finished plain jobs and whole finished arrays; every id is checked first."""
        if len(set(e.ids)) != len(e.ids):
            raise InvalidRequest("a purge names a job twice")
        for ident in e.ids:
            number, index = parse_job_id(ident)
            if index is not None or str(number) != ident:
                raise InvalidRequest(f"a purge names {ident!r}, not a job or array number")
            array = self.arrays.get(number)
            if array is not None:
                if not array.finished:
                    raise Conflict(f"cannot purge job array {number}: it has not finished")
                continue
            job = self.jobs.get(ident)
            if job is None:
                raise NotFound(f"job {ident} does not exist")
            if not job.state.finished:
                raise Conflict(f"cannot purge job {ident}: it is {job.state.value}")
        for ident in e.ids:
            number = int(ident)
            if number in self.arrays:
                for task in self.tasks_of(number):
                    del self.jobs[task.id]
                    self.counts[(task.state, task.spec.queue)] -= 1
                self.array_tasks.pop(number, None)
                array = self.arrays.pop(number)
                self._forget_key(array.spec.user, array.submit_key, ident)
                self.pending_arrays.pop(number, None)
            else:
                job = self.jobs.pop(ident)
                self.finished_jobs.pop(ident, None)
                self._forget_key(job.spec.user, job.submit_key, ident)
                self.counts[(job.state, job.spec.queue)] -= 1
