"""The data of `ClusterState`: its containers and the lookups over them (read-only).

`ClusterState` (xce/core/state.py) holds one `StateData` and the parts made over it: the
index keeper (state_index.py) and the event handlers (state_jobs.py, state_admin.py). Each
part is given this object when it is made and binds the containers it uses, so a container
is replaced only before the parts are made (`ClusterState.restore`, `ClusterState.check`).
"""

from __future__ import annotations

from collections import Counter

from xce.core.deps import Outcome
from xce.core.errors import InvalidRequest, NotFound
from xce.core.model import (
    ArrayRecord,
    HostLoad,
    HostRecord,
    JobRecord,
    JobState,
    QueueRecord,
    ReservationRecord,
    task_id,
)


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


class StateData:
    """Every container of the state, the numbering, and how to read one record of it."""

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
        self.at = 0.0  # the time of the event being applied (events carry their own time)

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

    def live_jobs_in(self, queue: str) -> int:
        """Pending, running and suspended jobs (array tasks not yet started included)."""
        live = sum(
            1 for job in self.jobs.values() if job.spec.queue == queue and not job.state.finished
        )
        return live + sum(len(a.pending) for a in self.arrays.values() if a.spec.queue == queue)
