"""The index keeper of `ClusterState`: every derived index moves with the job records.

Derived indexes (pending jobs, host load, array counters, counts by state and queue,
dependency watches) are kept up to date in one place, `put_job`, so they can never drift
from the records. It runs for every job event, so it is written for speed: the keeper binds
the containers of its `StateData` when it is made, and reads them as `self.<name>`.
"""

from __future__ import annotations

import dataclasses

from xce.core import eligibility
from xce.core.allocation import host_memory_mb
from xce.core.model import HostLoad, JobRecord, JobState
from xce.core.state_base import StateData

replace = dataclasses.replace
_ACTIVE = frozenset(s for s in JobState if s.active)
_FINISHED = frozenset(s for s in JobState if s.finished)
_PEND = JobState.PEND
_IDLE = HostLoad()


def _add_licenses(
    held: tuple[tuple[str, int], ...], asked: tuple[tuple[str, str], ...], sign: int
) -> tuple[tuple[str, int], ...]:
    counts = dict(held)
    for name, count in asked:
        counts[name] = counts.get(name, 0) + sign * int(count)
    return tuple(sorted((k, v) for k, v in counts.items() if v))


def held_slots(job: JobRecord) -> int:
    """The slots an active job holds: none while it is suspended by a preemption (the
    preemptor runs in them), its memory stays held all the same."""
    if job.preempted_by and job.state in (JobState.SSUSP, JobState.USUSP):
        return 0
    return job.spec.slots


class IndexKeeper:
    """Writes job records (`put_job`, `store`) and keeps every derived index with them."""

    def __init__(self, data: StateData) -> None:
        self.data = data
        # The containers, bound once: `data`'s own objects (overlays in a scratch state).
        self.jobs = data.jobs
        self.arrays = data.arrays
        self.counts = data.counts
        self.pending = data.pending
        self.pending_arrays = data.pending_arrays
        self.array_tasks = data.array_tasks
        self.submit_keys = data.submit_keys
        self.finished_jobs = data.finished_jobs
        self.waiting_on_deps = data.waiting_on_deps
        self.host_load = data.host_load
        self.dependents = data.dependents
        self.job = data.job

    def put_job(self, old: JobRecord | None, new: JobRecord) -> None:
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
        and an index the change cannot touch is not touched."""
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

    def index_restored(self, jobs: list[JobRecord]) -> None:
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

    def _load(self, host: str, job: JobRecord, sign: int) -> None:
        if job.allocation:  # multi-host: each host holds its share
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

    def materialise(self, job_id: str) -> tuple[JobRecord | None, JobRecord]:
        """(stored record or None if virtual, current record) for a job or pending task."""
        stored = self.jobs.get(job_id)
        if stored is not None:  # the usual case: one lookup
            return stored, stored
        current = self.job(job_id)
        return self.jobs.get(current.id), current

    def store(self, stored: JobRecord | None, new: JobRecord) -> None:
        """Write a job; a task leaving an array's pending set is removed from it."""
        if stored is None and new.array_index is not None:
            array = self.arrays[new.number]
            pending = array.pending.without(new.array_index)
            self.arrays[array.id] = replace(array, pending=pending)
            if not pending:
                self.pending_arrays.pop(array.id, None)
                eligibility.watch_array(self, self.arrays[array.id])
        self.put_job(stored, new)

    def forget_key(self, user: str, key: str, job_id: str) -> None:
        if key and self.submit_keys.get((user, key)) == job_id:
            del self.submit_keys[(user, key)]
