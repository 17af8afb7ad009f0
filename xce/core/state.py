"""`ClusterState`: the whole controller state in memory, changed only by `apply(event)`.

`apply` validates an event completely before it mutates anything, so an event that raises
leaves the state exactly as it was. Derived indexes (pending jobs, host load, array counters)
are kept up to date in one place, `_put_job`, so they can never drift from the records.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from xce.core import eligibility, gres, lifecycle
from xce.core import events as ev
from xce.core.allocation import check_allocation, host_memory_mb
from xce.core.deps import Outcome
from xce.core.errors import Conflict, InvalidRequest, NotFound
from xce.core.fastreplace import replacer
from xce.core.model import (
    ArrayRecord,
    HostAdmin,
    HostLoad,
    HostRecord,
    JobRecord,
    JobSpec,
    JobState,
    QueueRecord,
    ReservationRecord,
    task_id,
)
from xce.core.reservations import check_reservation
from xce.core.scratch import Overlay

replace = dataclasses.replace
# Every container `apply` may change; `check` sees them through overlays.
_CONTAINERS = (
    "jobs",
    "arrays",
    "queues",
    "hosts",
    "host_load",
    "pending",
    "pending_arrays",
    "array_tasks",
    "finished_jobs",
    "waiting_on_deps",
    "counts",
    "submit_keys",
    "reservations",
    "dependents",
)
_NESTED = ("array_tasks", "dependents")  # containers whose values change in place


def parse_job_id(job_id: str) -> tuple[int, int | None]:
    """Split `17` or `17[5]` into (number, index); anything else is `InvalidRequest`."""
    text = job_id.strip()
    try:
        if text.endswith("]") and "[" in text:
            head, _, rest = text.partition("[")
            return int(head), int(rest[:-1])
        return int(text), None
    except ValueError:
        raise InvalidRequest(f"{job_id!r} is not a job id (expected e.g. 17 or 17[5])") from None


def _add_licenses(
    held: tuple[tuple[str, int], ...], asked: tuple[tuple[str, str], ...], sign: int
) -> tuple[tuple[str, int], ...]:
    counts = dict(held)
    for name, count in asked:
        counts[name] = counts.get(name, 0) + sign * int(count)
    return tuple(sorted((k, v) for k, v in counts.items() if v))


def _waiting_terms(spec: JobSpec) -> tuple:
    """What a job's eligibility depends on besides holds: its dependency and begin time."""
    return (spec.dependency, spec.begin_time)


def _still_eligible(before: float | None, now_from: float | None, at: float) -> float | None:
    """A job eligible before a modify and still eligible at once keeps its time (its wait
    goes on); one that must now wait (a dependency, a later begin) gets the new answer."""
    if before is not None and now_from == at:
        return before
    return now_from


def held_slots(job: JobRecord) -> int:
    """The slots an active job holds: none while it is suspended by a preemption (the
    preemptor runs in them), its memory stays held all the same."""
    if job.preempted_by and job.state in (JobState.SSUSP, JobState.USUSP):
        return 0
    return job.spec.slots


_ACTIVE = frozenset(s for s in JobState if s.active)
_FINISHED = frozenset(s for s in JobState if s.finished)
_PEND = JobState.PEND
_IDLE = HostLoad()


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
# outputs, host_usage.
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
)


class ClusterState:
    """The single writer of controller state; see the module docstring for its promises."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobRecord] = {}
        self.arrays: dict[int, ArrayRecord] = {}
        self.queues: dict[str, QueueRecord] = {}
        self.hosts: dict[str, HostRecord] = {}
        # Advance reservations by name (xce/core/reservations.py validates them).
        self.reservations: dict[str, ReservationRecord] = {}
        self.next_number = 1
        # The highest job number reserved (JobNumbersReserved); 0: numbers are not reserved
        # (a single controller, or a log written before reservations existed).
        self.number_ceiling = 0
        # (user, Idempotency-Key) -> job or array id: a retried submission finds its job.
        # Derived from the records (JobRecord/ArrayRecord.submit_key), so replay, checkpoints
        # and replication carry it; a key lives as long as its job or array.
        self.submit_keys: dict[tuple[str, str], str] = {}
        self.host_load: dict[str, HostLoad] = {}
        self.pending: dict[str, None] = {}
        self.pending_arrays: dict[int, None] = {}
        self.array_tasks: dict[int, dict[str, None]] = {}
        # For retention: finished plain jobs, and unfinished jobs that have dependencies.
        self.finished_jobs: dict[str, None] = {}
        self.waiting_on_deps: dict[str, None] = {}
        # Stored jobs by (state, queue), kept with the other indexes so that metrics and
        # status views never walk a million records.
        self.counts: Counter[tuple[JobState, str]] = Counter()
        # target job/task/array id -> ids of the jobs and arrays not yet eligible that name it
        # in a dependency (xce/core/eligibility.py): who to re-evaluate when it ends. Derived
        # from the records alone, so a restored state has the same one.
        self.dependents: dict[str, dict[str, None]] = {}
        self.applied = 0
        self._at = 0.0  # the time of the event being applied (events carry their own time)
        self._handlers: dict[type, Callable[[Any], None]] = {
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
            ev.ArrayHeld: lambda e: self._array_hold(e.number, True),
            ev.ArrayReleased: lambda e: self._array_hold(e.number, False),
            ev.ArrayCancelled: self._array_cancelled,
            ev.JobsPurged: self._jobs_purged,
            ev.JobNumbersReserved: self._numbers_reserved,
            ev.ReservationAdded: self._reservation_added,
            ev.ReservationDeleted: self._reservation_deleted,
            ev.JobModified: self._job_modified,
            ev.JobPreempted: self._job_preempted,
        }

    # --- the one mutator ------------------------------------------------------------------

    def apply(self, event: ev.Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise InvalidRequest(f"unknown event type {type(event).__name__}")
        self._at = event.at
        handler(event)
        self.applied += 1

    def check(self, events: Sequence[ev.Event]) -> None:
        """Raise what applying `events` in order would raise, changing nothing.

        `apply` keeps one event all-or-nothing; a batch needs this too (a commit, a batch of
        replicated records): the events are applied to a scratch state whose containers are
        overlays of these (`xce.core.scratch`), which costs what the batch changes, not a
        copy of the state.
        """
        scratch = ClusterState()
        for name in _CONTAINERS:
            setattr(scratch, name, Overlay(getattr(self, name), nested=name in _NESTED))
        scratch.next_number = self.next_number
        scratch.number_ceiling = self.number_ceiling
        for event in events:
            scratch.apply(event)

    # --- lookups --------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord:
        """A materialised job, or a virtual record for a task that has not started."""
        found = self.jobs.get(job_id)
        if found is not None:
            return found
        number, index = parse_job_id(job_id)
        canonical = task_id(number, index) if index is not None else str(number)
        if canonical != job_id:
            return self.job(canonical)
        array = self.arrays.get(number)
        if array is not None and index is not None and index in array.pending:
            state = JobState.PSUSP if array.held else JobState.PEND
            return JobRecord(
                job_id,
                number,
                array.spec,
                state,
                array.submit_time,
                index,
                eligible_time=array.eligible_time,
            )
        if array is not None and index is not None and index in array.indices:
            return JobRecord(
                job_id,
                number,
                array.spec,
                JobState.EXIT,
                array.submit_time,
                index,
                reason="killed before it started",
            )
        raise NotFound(f"job {job_id} does not exist")

    def outcome(self, job_ref: str) -> Outcome:
        """For dependencies: how a job, task or whole array ended (`OutcomeLookup`)."""
        number, index = parse_job_id(job_ref)
        if index is None and number in self.arrays:
            array = self.arrays[number]
            if not array.finished:
                return Outcome.RUNNING
            return Outcome.DONE if array.exited == 0 else Outcome.FAILED
        try:
            job = self.job(job_ref)
        except NotFound:
            return Outcome.MISSING
        if job.state is JobState.DONE:
            return Outcome.DONE
        if job.state is JobState.EXIT:
            return Outcome.FAILED
        return Outcome.RUNNING

    def queue(self, name: str) -> QueueRecord:
        try:
            return self.queues[name]
        except KeyError:
            raise NotFound(f"queue {name!r} does not exist") from None

    def host(self, name: str) -> HostRecord:
        try:
            return self.hosts[name]
        except KeyError:
            raise NotFound(f"host {name!r} does not exist") from None

    def licenses_in_use(self) -> dict[str, int]:
        """Licenses held by active jobs, cluster-wide (derived from the host loads)."""
        used: dict[str, int] = {}
        for load in self.host_load.values():
            for name, count in load.licenses:
                used[name] = used.get(name, 0) + count
        return used

    def array(self, number: int) -> ArrayRecord:
        try:
            return self.arrays[number]
        except KeyError:
            raise NotFound(f"job array {number} does not exist") from None

    def tasks_of(self, number: int) -> list[JobRecord]:
        """The materialised tasks of an array, in the order they were materialised."""
        return [self.jobs[i] for i in self.array_tasks.get(number, ())]

    def jobs_on(self, host: str) -> frozenset[str]:
        load = self.host_load.get(host)
        return load.jobs if load else frozenset()

    # --- the index keeper -----------------------------------------------------------------

    def _put_job(self, old: JobRecord | None, new: JobRecord) -> None:
        """Store `new` and move every derived index from `old`'s state to `new`'s."""
        self._index(old, new)
        if new.array_index is not None:
            self._count_task(old, new)
        if new.state in _FINISHED and (old is None or old.state not in _FINISHED):
            eligibility.target_ended(self, new)

    def _count_task(self, old: JobRecord | None, new: JobRecord) -> None:
        """Move an array task from its old state's counter (active, done, exited) to its
        new one's."""
        array = self.arrays[new.number]
        delta = {"active": 0, "done": 0, "exited": 0}
        for state, sign in ((old.state if old else None, -1), (new.state, +1)):
            if state is None:
                continue
            if state in _ACTIVE:
                delta["active"] += sign
            elif state is JobState.DONE:
                delta["done"] += sign
            elif state is JobState.EXIT:
                delta["exited"] += sign
        if any(delta.values()):
            self.arrays[array.id] = replace(
                array,
                active=array.active + delta["active"],
                done=array.done + delta["done"],
                exited=array.exited + delta["exited"],
            )

    def _index(self, old: JobRecord | None, new: JobRecord) -> None:
        """The indexes that are pure functions of the job records (not array counters).

        Runs for every job event (three per job at least: submit, start, end), so states are
        tested by identity and set membership rather than through `JobState`'s properties,
        and an index the change cannot touch is not touched (issue 21)."""
        job_id, state, spec = new.id, new.state, new.spec
        self.jobs[job_id] = new
        if old is None:
            self.counts[(state, spec.queue)] += 1
            if new.array_index is not None:
                self.array_tasks.setdefault(new.number, {})[job_id] = None
            if new.submit_key:
                self.submit_keys[(spec.user, new.submit_key)] = job_id
            old_state = None
        else:
            old_state = old.state
            if old_state is not state or old.spec.queue != spec.queue:
                counts = self.counts
                counts[(old_state, old.spec.queue)] -= 1
                counts[(state, spec.queue)] += 1
            if old_state is _PEND:
                self.pending.pop(job_id, None)
            elif old_state in _ACTIVE and old.host:
                self._load(old.host, old, -1)
        if state is _PEND:
            self.pending[job_id] = None
        elif state in _ACTIVE and new.host:
            self._load(new.host, new, +1)
        if new.array_index is None:
            if state in _FINISHED:
                self.finished_jobs.pop(job_id, None)  # a record rewritten moves to the end
                self.finished_jobs[job_id] = None
            elif old_state in _FINISHED:
                self.finished_jobs.pop(job_id, None)
        if spec.dependency:
            if state in _FINISHED:
                self.waiting_on_deps.pop(job_id, None)
            else:
                self.waiting_on_deps[job_id] = None
            eligibility.watch_job(self, old, new)

    def _index_restored(self, jobs: list[JobRecord]) -> None:
        """`_index(None, job)` for each job of a checkpoint, in order, as one loop: what a
        first index does, without the branches for an old record (a checkpoint of a
        million jobs spent a third of its load time in `_index`)."""
        pend, active, finished = JobState.PEND, _ACTIVE, _FINISHED
        index, counts, pending = self.jobs, self.counts, self.pending
        finished_jobs, waiting, keys = self.finished_jobs, self.waiting_on_deps, self.submit_keys
        for job in jobs:
            job_id, state, spec = job.id, job.state, job.spec
            index[job_id] = job
            counts[(state, spec.queue)] += 1
            if state is pend:
                pending[job_id] = None
            elif state in active and job.host:
                self._load(job.host, job, +1)
            if job.array_index is not None:
                self.array_tasks.setdefault(job.number, {})[job_id] = None
            elif state in finished:
                finished_jobs[job_id] = None
            if job.submit_key:
                keys[(spec.user, job.submit_key)] = job_id
            if spec.dependency and state not in finished:
                waiting[job_id] = None
                if job.eligible_time is None:
                    eligibility.watch(self, job_id, spec, True)

    # --- checkpoints ----------------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        jobs: list[JobRecord],
        arrays: list[ArrayRecord],
        queues: list[QueueRecord],
        hosts: list[HostRecord],
        next_number: int,
        number_ceiling: int = 0,
        reservations: Sequence[ReservationRecord] = (),
    ) -> ClusterState:
        """Rebuild a state from checkpointed records; derived indexes are recomputed."""
        state = cls()
        state.reservations = {r.name: r for r in reservations}
        state.queues = {q.name: q for q in queues}
        state.hosts = {h.name: h for h in hosts}
        state.arrays = {a.id: a for a in arrays}
        state.pending_arrays = {a.id: None for a in arrays if a.pending}
        state.submit_keys = {(a.spec.user, a.submit_key): str(a.id) for a in arrays if a.submit_key}
        state._index_restored(sorted(jobs, key=lambda j: j.order_key))
        for a in arrays:
            eligibility.watch_array(state, a)
        state.next_number = next_number
        state.number_ceiling = number_ceiling
        return state

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

    def _forget_key(self, user: str, key: str, job_id: str) -> None:
        if key and self.submit_keys.get((user, key)) == job_id:
            del self.submit_keys[(user, key)]

    def _load(self, host: str, job: JobRecord, sign: int) -> None:
        if job.allocation:  # multi-host (issue 15): each host holds its share
            held = held_slots(job) > 0  # none while a preemption suspends it
            for k, part in enumerate(job.allocation):
                self._load_part(
                    part.host,
                    job,
                    sign,
                    part.slots if held else 0,
                    host_memory_mb(job.spec, part.slots),
                    k == 0,
                    job.devices if k == 0 else part.devices,
                )
            return
        self._load_part(host, job, sign, held_slots(job), job.spec.memory_mb)

    def _load_part(
        self,
        host: str,
        job: JobRecord,
        sign: int,
        slots: int,
        memory_mb: int,
        first: bool = True,
        granted: tuple[str, ...] | None = None,
    ) -> None:
        """One host's share of an active job: its licenses count once, on the first host;
        its devices on each host, that host's grant (`granted`; the job's by default)."""
        load = self.host_load.get(host) or _IDLE
        jobs = load.jobs | {job.id} if sign > 0 else load.jobs - {job.id}
        if not jobs:
            # An idle host has no entry, so a restored state equals the live one.
            self.host_load.pop(host, None)
            return
        devices, licenses = load.devices, load.licenses
        mine = job.devices if granted is None else granted
        if mine:
            devices = devices | set(mine) if sign > 0 else devices - set(mine)
        if job.spec.licenses and first:
            licenses = _add_licenses(licenses, job.spec.licenses, sign)
        self.host_load[host] = HostLoad(
            load.slots + sign * slots,
            load.memory_mb + sign * memory_mb,
            jobs,
            devices,
            licenses,
        )

    def _materialise(self, job_id: str) -> tuple[JobRecord | None, JobRecord]:
        """(stored record or None if virtual, current record) for a job or pending task."""
        stored = self.jobs.get(job_id)
        if stored is not None:  # the usual case: one lookup
            return stored, stored
        current = self.job(job_id)
        return self.jobs.get(current.id), current

    def _store(self, stored: JobRecord | None, new: JobRecord) -> None:
        """Write a job; a task leaving an array's pending set is removed from it."""
        if stored is None and new.array_index is not None:
            array = self.arrays[new.number]
            pending = array.pending.without(new.array_index)
            self.arrays[array.id] = replace(array, pending=pending)
            if not pending:
                self.pending_arrays.pop(array.id, None)
                eligibility.watch_array(self, self.arrays[array.id])
        self._put_job(stored, new)

    # --- queues and hosts -----------------------------------------------------------------

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

    def live_jobs_in(self, queue: str) -> int:
        """Pending, running and suspended jobs (array tasks not yet started included)."""
        live = sum(
            1 for job in self.jobs.values() if job.spec.queue == queue and not job.state.finished
        )
        return live + sum(len(a.pending) for a in self.arrays.values() if a.spec.queue == queue)

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

    # --- advance reservations -------------------------------------------------------------

    def _reservation_added(self, e: ev.ReservationAdded) -> None:
        check_reservation(e.reservation, self.reservations)
        self.reservations[e.reservation.name] = e.reservation

    def _reservation_deleted(self, e: ev.ReservationDeleted) -> None:
        if e.name not in self.reservations:
            raise NotFound(f"reservation {e.name!r} does not exist")
        del self.reservations[e.name]

    # --- jobs -----------------------------------------------------------------------------

    def _take_number(self, number: int, queue: str) -> None:
        if number != self.next_number:
            raise Conflict(f"job number {number} is out of order (next is {self.next_number})")
        if self.number_ceiling and number > self.number_ceiling:
            raise Conflict(
                f"job number {number} is not reserved (reserved up to {self.number_ceiling})"
            )
        self.queue(queue)
        self.next_number += 1

    def _numbers_reserved(self, e: ev.JobNumbersReserved) -> None:
        if e.first < self.next_number or e.last < e.first or e.last <= self.number_ceiling:
            raise Conflict(
                f"cannot reserve job numbers {e.first}..{e.last}: the next is "
                f"{self.next_number}, reserved up to {self.number_ceiling}"
            )
        self.next_number = e.first
        self.number_ceiling = e.last

    def _job_submitted(self, e: ev.JobSubmitted) -> None:
        self._take_number(e.number, e.spec.queue)
        state = JobState.PSUSP if e.spec.hold else JobState.PEND
        eligible = None if e.spec.hold else eligibility.eligible_from(self, e.spec, e.at)
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
            eligible_time=None if e.spec.hold else eligibility.eligible_from(self, e.spec, e.at),
        )
        eligibility.watch_array(self, self.arrays[e.number])
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
            eligibility.eligible_from(self, job.spec, e.at)
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
            eligible_time=eligibility.eligible_from(self, job.spec, self._at),
            host_usage=(),
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
                reason,
                e.outputs,
                e.host_usage,
            ),
        )

    def _job_modified(self, e: ev.JobModified) -> None:
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
                        array.eligible_time, eligibility.eligible_from(self, e.spec, e.at), e.at
                    )
                )
            if array.spec.dependency:
                eligibility.watch(self, str(number), array.spec, False)
            self.arrays[number] = replace(array, spec=e.spec, eligible_time=eligible)
            eligibility.watch_array(self, self.arrays[number])
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
                    stored.eligible_time, eligibility.eligible_from(self, e.spec, e.at), e.at
                ),
            )
        # the dependency index follows the new terms: drop the old registration, then
        # register the new one if the job still waits (both idempotent)
        if stored.spec.dependency and stored.eligible_time is None:
            eligibility.watch(self, stored.id, stored.spec, False)
        if not e.spec.dependency:
            self.waiting_on_deps.pop(stored.id, None)
        self._put_job(stored, new)
        if new.spec.dependency and new.eligible_time is None and not new.state.finished:
            eligibility.watch(self, new.id, new.spec, True)

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

    def _array_hold(self, number: int, held: bool) -> None:
        array = self.array(number)
        if held == array.held:
            return
        eligible = eligibility.eligible_from(self, array.spec, self._at) if not held else None
        self.arrays[number] = replace(array, held=held, eligible_time=eligible)
        eligibility.watch_array(self, self.arrays[number])

    def _array_cancelled(self, e: ev.ArrayCancelled) -> None:
        array = self.array(e.number)
        count = len(array.pending)
        self.arrays[e.number] = replace(
            array, pending=type(array.pending)(), exited=array.exited + count
        )
        self.pending_arrays.pop(e.number, None)
        eligibility.watch_array(self, self.arrays[e.number])
        if count:
            eligibility.tasks_cancelled(self, e.number)

    # --- retention ------------------------------------------------------------------------

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
