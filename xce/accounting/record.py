"""One accounting record per ended attempt, derived from applied events (pure: no I/O).

An attempt ends when its job is finished (DONE or EXIT: its own exit, a kill, a lost host
whose queue ends jobs), or when it is requeued (by hand, by a worker report that ends an
attempt a requeue asked for, or by a lost host). Most ends leave everything the record needs
in the job record just after the event; a requeue erases the attempt's host, start and usage,
so `AttemptWatch.before` keeps the job record as it was just before a requeuing event.

The same watch runs wherever events are applied: the primary's `commit`, recovery's replay
and a standby's replication, so each node derives the same records from the same log.
Records are keyed by (job id, attempt): job ids are never reused, so a record derived twice
(a replay after a crash) is the same record, stored once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

from xce.core import events as ev
from xce.core.arrayspec import IndexSet
from xce.core.model import ArrayRecord, JobRecord, JobSpec, JobState, task_id
from xce.core.state import ClusterState

MIB = 1024 * 1024
REQUEUED = "REQUEUED"  # the state of an attempt that a requeue ended (sacct's REQUEUED)


@dataclass(frozen=True, slots=True)
class AcctRecord:
    """One ended attempt; the column order of the store's `attempts` table."""

    job_id: str
    attempt: int
    number: int
    array_index: int | None
    name: str
    user: str
    grp: str
    queue: str
    submit_time: float
    start_time: float | None
    end_time: float
    wait_s: float | None
    host: str | None
    hosts: str  # "host:slots[,host:slots...]": the allocation's shape (DESIGN.md)
    req_slots: int
    req_memory_mb: int
    req_walltime_s: int | None
    req_gpus: int
    resources: str
    state: str  # DONE, EXIT or REQUEUED
    exit_code: int | None
    exit_signal: int | None
    reason: str
    cpu_user_s: float
    cpu_system_s: float
    max_rss_bytes: int
    wall_s: float
    cpu_eff: float | None
    mem_eff: float | None
    seq: int  # the WAL record that ended the attempt
    # When the attempt became eligible (JobRecord.eligible_time; Slurm's EligibleTime);
    # wait_s counts from it. Last: a store from before it gets the column appended
    # (store._migrate) and its older rows read None.
    eligible_time: float | None = None
    # The granted GPUs' mean utilisation and memory peak through NVML (appended
    # like eligible_time): None when nothing was read (no GPUs, no NVML, older rows).
    gpu_util_pct: float | None = None
    gpu_mem_peak_bytes: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in COLUMNS}


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(AcctRecord))


def build(
    job: JobRecord, state: str, end: float, reason: str, seq: int, group: str = ""
) -> AcctRecord:
    """The record of `job`'s current attempt, ended at `end` in `state`.

    Wall time is the worker's measure when it reported one, else end - start; CPU
    efficiency is CPU / (slots x wall) and memory efficiency peak / requested (None when
    nothing was requested or the attempt never ran)."""
    spec = job.spec
    usage = job.usage
    started = job.start_time
    eligible = job.eligible_time
    # The wait is the scheduler's: from eligible (not from submit, which would count a
    # hold, a dependency or a begin time the user asked for) to start.
    waited_from = (
        eligible if eligible is not None and eligible <= (started or eligible) else job.submit_time
    )
    wall = 0.0
    if started is not None:
        wall = usage.wall_time_s if usage is not None and usage.wall_time_s > 0 else end - started
        wall = max(wall, 0.0)
    cpu_user = usage.cpu_user_s if usage is not None else 0.0
    cpu_sys = usage.cpu_system_s if usage is not None else 0.0
    rss = usage.max_rss_bytes if usage is not None else 0
    cpu_eff = (
        (cpu_user + cpu_sys) / (spec.slots * wall) if started is not None and wall > 0 else None
    )
    mem_eff = rss / (spec.memory_mb * MIB) if started is not None and spec.memory_mb > 0 else None
    return AcctRecord(
        job_id=job.id,
        attempt=job.attempt,
        number=job.number,
        array_index=job.array_index,
        name=spec.name,
        user=spec.user,
        grp=group,
        queue=spec.queue,
        submit_time=job.submit_time,
        start_time=started,
        end_time=end,
        wait_s=max(started - waited_from, 0.0) if started is not None else None,
        host=job.host if started is not None else None,
        hosts=",".join(f"{p.host}:{p.slots}" for p in job.hosts)
        if started is not None
        else "",  # every host of a multi-host allocation
        req_slots=spec.slots,
        req_memory_mb=spec.memory_mb,
        req_walltime_s=spec.walltime_s,
        req_gpus=int(dict(spec.gres).get("gpu", 0)),
        resources=spec.resources,
        state=state,
        exit_code=job.exit_code if state != REQUEUED else None,
        exit_signal=job.exit_signal if state != REQUEUED else None,
        reason=reason,
        cpu_user_s=cpu_user,
        cpu_system_s=cpu_sys,
        max_rss_bytes=rss,
        wall_s=wall,
        cpu_eff=cpu_eff,
        mem_eff=mem_eff,
        seq=seq,
        eligible_time=eligible,
        gpu_util_pct=usage.gpu_util_pct if usage is not None and usage.gpu_mem_peak_bytes else None,
        gpu_mem_peak_bytes=usage.gpu_mem_peak_bytes
        if usage is not None and usage.gpu_mem_peak_bytes
        else None,
    )


@dataclass(frozen=True, slots=True)
class CancelledTasks:
    """The records of an array's tasks that a whole-array kill (`ArrayCancelled`) ended
    before they started: one per task (state EXIT, no start, no host, no usage), attempt 0.

    Kept as the array and its index set, not as records: a kill of a million-task array
    costs the applying thread (the event loop, on the primary) O(1); the writer thread
    expands it (`records()`) and stores it in transactions of `feed.BATCH` records. The
    records are keyed (job id, attempt) like any other, so a replay stores none twice."""

    array: ArrayRecord  # as it was just before the kill
    indices: IndexSet  # the tasks the kill ended (its pending set then)
    at: float
    reason: str
    seq: int
    group: str

    def __len__(self) -> int:
        return len(self.indices)

    def records(self) -> Iterator[AcctRecord]:
        a = self.array
        for index in self.indices:
            job = JobRecord(
                task_id(a.id, index),
                a.id,
                a.spec,
                JobState.EXIT,
                a.submit_time,
                index,
                end_time=self.at,
                reason=self.reason,
                eligible_time=a.eligible_time,
            )
            yield build(job, JobState.EXIT.value, self.at, self.reason, self.seq, self.group)


Derived = AcctRecord | CancelledTasks  # what one applied event can leave for the store


def count(items: list[Derived]) -> int:
    """How many records `items` stand for."""
    return sum(len(i) if type(i) is CancelledTasks else 1 for i in items)


def expand(items: list[Derived]) -> Iterator[AcctRecord]:
    """Every record of `items`, expanding whole-array kills as it goes."""
    for item in items:
        if isinstance(item, CancelledTasks):
            yield from item.records()
        else:
            yield item


_ENDS = (ev.JobFinished, ev.JobKilled, ev.JobRequeued, ev.JobHostLost)
_REQUEUES = (ev.JobRequeued, ev.JobHostLost)


class AttemptWatch:
    """Turns applied events into records: call `before` just before `state.apply(event)`
    and `after` just after; `after` returns the record of an attempt the event ended."""

    def __init__(self, group_of: Callable[[str], str] | None = None) -> None:
        self.group_of = group_of or (lambda user: "")
        self._pre: JobRecord | None = None
        self._pre_array: ArrayRecord | None = None

    def before(self, state: ClusterState, event: ev.Event) -> None:
        self._pre = state.jobs.get(event.job_id) if isinstance(event, _REQUEUES) else None
        self._pre_array = (
            state.arrays.get(event.number) if isinstance(event, ev.ArrayCancelled) else None
        )

    def after(self, state: ClusterState, event: ev.Event, seq: int) -> Derived | None:
        if isinstance(event, ev.ArrayCancelled):
            array, self._pre_array = self._pre_array, None
            if array is None or not array.pending:
                return None
            return CancelledTasks(
                array,
                array.pending,
                event.at,
                event.reason,
                seq,
                charged(array.spec, self.group_of),
            )
        if not isinstance(event, _ENDS):
            return None
        pre, self._pre = self._pre, None
        job = state.jobs.get(event.job_id)
        if job is None:
            return None
        if job.state.finished:
            return build(
                job,
                job.state.value,
                job.end_time or event.at,
                job.reason,
                seq,
                charged(job.spec, self.group_of),
            )
        if job.state is JobState.PEND and pre is not None and pre.state.active:
            # A requeue of a running attempt (a finished one already has its record).
            return build(pre, REQUEUED, event.at, job.reason, seq, charged(pre.spec, self.group_of))
        return None


def finished_records(
    state: ClusterState, seq: int, group_of: Callable[[str], str] | None = None
) -> list[AcctRecord]:
    """The records of every finished job in `state` (the last attempt of each): what a
    store that fell behind a checkpoint can still recover from the checkpoint itself."""
    group_of = group_of or (lambda user: "")
    return [
        build(
            job, job.state.value, job.end_time or 0.0, job.reason, seq, charged(job.spec, group_of)
        )
        for job in state.jobs.values()
        if job.state.finished and job.end_time is not None
    ]


def charged(spec: JobSpec, group_of: Callable[[str], str]) -> str:
    """The accounting group a job is charged to: the account it named (sbatch --account,
    bsub -P), else its user's group."""
    return spec.account or group_of(spec.user)
