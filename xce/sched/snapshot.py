"""A read-only view of what the scheduler needs, taken from `ClusterState` in one pass.

The scheduler never sees `ClusterState` itself: it gets plain immutable values, so a pass can
run off the event loop (or in another process) while the state moves on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Final, overload

from xce.config.scheduler import PredictiveSettings
from xce.core import gres
from xce.core.allocation import host_memory_mb
from xce.core.arrayspec import IndexSet
from xce.core.deps import DepStatus, evaluate
from xce.core.fastinit import fast_init
from xce.core.model import (
    HostLoad,
    HostRecord,
    HostStatus,
    JobRecord,
    JobSpec,
    QueueRecord,
    ReservationRecord,
)
from xce.core.state import ClusterState
from xce.core.state_index import held_slots
from xce.sched.passes.memo import PassMemo
from xce.sched.predict import Predictions
from xce.sched.priority import PrioritySettings

DEFAULT_PRIORITY = PrioritySettings()  # immutable: one for every snapshot that has none
DEFAULT_PREDICTIVE = PredictiveSettings()


@fast_init
@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    slots: int
    memory_mb: int
    free_slots: int
    free_memory_mb: int
    attributes: tuple[tuple[str, str], ...]
    schedulable: bool
    # Devices by kind (HostRecord.gres) and the free ones as grant names ("gpu:0"), in the
    # host's order (xce/core/gres.py); appended with defaults so other views need not care.
    gres: tuple[tuple[str, str], ...] = ()
    free_devices: tuple[str, ...] = ()


# What a job runs, with what, and where its files go: no scheduling pass reads these fields
# of a pending job's spec (the worker gets them from the record). The controller's views
# leave them out (`scheduled`) and hand jobs alike in every other field one spec object
# (xce/sched/incremental.py), so what a pass finds for one job's spec (no host fits it, its
# prediction) holds at once for the others, as it does for an array's tasks.
NOT_SCHEDULED: Final[dict[str, Any]] = {
    "command": None,
    "script": None,
    "env": (),
    "cwd": None,
    "inputs": (),
    "outputs": (),
    "stdout_file": None,
    "stderr_file": None,
    "submit_host": "",
    "submit_dir": None,
}


def scheduled(spec: JobSpec) -> JobSpec:
    """`spec` as a pass reads it: without the fields of `NOT_SCHEDULED`."""
    return replace(spec, **NOT_SCHEDULED)


@fast_init
@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    number: int
    index: int | None
    spec: JobSpec
    deps: DepStatus
    submit_time: float = 0.0  # the age factor of multifactor priority (xce/sched/priority.py)


@fast_init
@dataclass(frozen=True, slots=True)
class PendingArray:
    number: int
    spec: JobSpec
    pending: IndexSet
    max_concurrent: int | None
    active: int
    deps: DepStatus
    submit_time: float = 0.0


@fast_init
@dataclass(frozen=True, slots=True)
class RunningJob:
    """An active job (running or suspended): it holds `slots` and `memory_mb` on `host`
    until `start_time + walltime_s` at the latest (None: no limit, no known end)."""

    job_id: str
    user: str
    queue: str
    host: str
    slots: int
    memory_mb: int
    start_time: float
    walltime_s: int | None
    # Preemption (xce/sched/passes/preemption.py): the job that suspended or is requeueing this
    # one ("" when none), its state (RUN, USUSP, SSUSP), whether its end was asked (a kill
    # or a requeue under way), and when it last started or resumed.
    preempted_by: str = ""
    state: str = "RUN"
    ending: bool = False
    since: float = 0.0
    asked_slots: int = 0  # the job's own slots (`slots` is 0 while a preemption holds it)
    # A multi-host job has one view per host, each with that host's share;
    # `part` marks all but the first, so a tally counts the job once and its slots in full.
    part: bool = False


class FreeTable:
    """What is free of each host, by index in `Snapshot.hosts`' order, kept current by a
    snapshot's maker that tracks it anyway (the simulator, xce/sched/sim/cluster.py): a pass
    copies these lists (`HostPool`) instead of reading every host's view, which on a
    cluster of many hosts was most of a short pass. `slots` and `memory_mb` are each
    host's free slots and memory (`HostView.free_slots`, `free_memory_mb`); `total` the
    free slots of the schedulable hosts that have some. Like the simulator's host list it
    is live, not a value: read-only to a pass, and planned before the next event. It
    describes `hosts`, the very sequence it was kept beside: a snapshot copied with other
    hosts (`dataclasses.replace`, as preemption's resume step does) is not described by
    it, and a pass then reads the views (`HostPool`)."""

    __slots__ = ("hosts", "memory_mb", "slots", "total")

    def __init__(
        self, hosts: Sequence[HostView], slots: list[int], memory_mb: list[int], total: int
    ) -> None:
        self.hosts = hosts
        self.slots, self.memory_mb, self.total = slots, memory_mb, total

    @classmethod
    def of(cls, hosts: Sequence[HostView]) -> FreeTable:
        """The table `hosts` show: what a pass without one computes (`HostPool`, once per
        event the controller applies: one walk of the hosts) and the simulator starts from."""
        slots: list[int] = []
        memory_mb: list[int] = []
        total = 0
        for host in hosts:
            slots.append(host.free_slots)
            memory_mb.append(host.free_memory_mb)
            total += cls.counted(host)
        return cls(hosts, slots, memory_mb, total)

    @staticmethod
    def counted(host: HostView) -> int:
        """What `host` adds to `total`: its free slots if it is schedulable."""
        free = host.free_slots
        return free if free > 0 and host.schedulable else 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FreeTable):
            return NotImplemented
        return (self.slots, self.memory_mb, self.total) == (
            other.slots,
            other.memory_mb,
            other.total,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"FreeTable({self.slots!r}, {self.memory_mb!r}, {self.total!r})"


class LazyViews(Sequence[RunningJob]):
    """Running views made when first read: a pass that times no reservation and tallies
    no usage (FCFS, first-fit) reads none, so the simulator (xce/sched/sim/cluster.py)
    does not make one per job for it. `make` returns the current views (and keeps them
    while nothing changes). Equal to the tuple it stands for; like `Snapshot.queued`, it
    reads its maker's current state: plan before the next event."""

    __slots__ = ("_all",)

    def __init__(self, make: Callable[[], tuple[RunningJob, ...]]) -> None:
        self._all = make

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> RunningJob: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[RunningJob, ...]: ...
    def __getitem__(self, index: int | slice) -> RunningJob | tuple[RunningJob, ...]:
        return self._all()[index]

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyViews):
            other = other._all()
        return self._all() == other

    def __repr__(self) -> str:
        return f"LazyViews({self._all()!r})"


def running_views(job: JobRecord) -> tuple[RunningJob, ...]:
    """The scheduler's views of an active job: one per host of its allocation."""
    spec = job.spec
    start = job.start_time or 0.0
    held = held_slots(job)
    if not job.allocation:
        return (
            RunningJob(
                job.id,
                spec.user,
                spec.queue,
                job.host or "",
                held,
                spec.memory_mb,
                start,
                spec.walltime_s,
                *preemption_view(job),
            ),
        )
    return tuple(
        RunningJob(
            job.id,
            spec.user,
            spec.queue,
            p.host,
            p.slots if held else 0,
            host_memory_mb(spec, p.slots),
            start,
            spec.walltime_s,
            *preemption_view(job),
            part=i > 0,
        )
        for i, p in enumerate(job.allocation)
    )


@fast_init  # (made per pass where usage changes: fairshare's replay, the controller)
@dataclass(frozen=True, slots=True)
class Snapshot:
    hosts: Sequence[HostView]  # a tuple, or the simulator's list kept current
    queues: dict[str, QueueRecord]
    jobs: tuple[PendingJob, ...]
    arrays: tuple[PendingArray, ...]
    # number -> (max_concurrent, active tasks) for every array with something pending
    array_limits: dict[int, tuple[int | None, int]]
    running: Sequence[RunningJob] = ()  # a tuple, or LazyViews
    # user -> decayed core-seconds of finished jobs (xce/sched/usage.py), for fairshare
    usage: Mapping[str, float] = field(default_factory=dict)
    # user -> fairshare group ([scheduler] groups); users not named are in "default"
    groups: Mapping[str, str] = field(default_factory=dict)
    # queue -> its pending jobs in submission order, instead of `jobs` (then empty): kept
    # up to date event by event (xce/sched/incremental.py), so that an FCFS pass reads only
    # the head of a long queue
    queued: Mapping[str, Collection[PendingJob]] | None = None
    # Cluster-wide licenses ([[license]] of the config) not held by active jobs; None: the
    # cluster counts none (submit refuses license requests then).
    licenses: Mapping[str, int] | None = None
    # Advance reservations (xce/sched/passes/advance.py), ended ones included: jobs that target
    # one are told it has ended
    reservations: tuple[ReservationRecord, ...] = ()
    # `[scheduler.priority]`, for the multifactor order plugin (xce/sched/priority.py)
    priority: PrioritySettings = DEFAULT_PRIORITY
    # Run-time predictions (xce/sched/predict.py) for queues whose policy predicts; None:
    # no queue predicts (the pass then judges every job by its walltime). Like `queued`, it
    # reads its maker's current history: plan before the next event.
    predictions: Predictions | None = field(default=None, compare=False, repr=False)
    # `[scheduler.predictive]`: the starvation guard and queue order of `predictive`
    predictive: PredictiveSettings = DEFAULT_PREDICTIVE
    # What passes over the same hosts and queues share (xce/sched/passes/memo.py): kept by the
    # snapshot's maker, None for a fresh snapshot; not part of what the snapshot shows
    memo: PassMemo | None = field(default=None, compare=False, repr=False)
    # The hosts' free slots and memory as the maker keeps them (FreeTable), None: a pass
    # reads them from `hosts`; not part of what the snapshot shows (it repeats `hosts`)
    free: FreeTable | None = field(default=None, compare=False, repr=False)

    def pending_jobs(self) -> Iterator[PendingJob]:
        """Every pending job, whichever of `jobs` and `queued` holds them."""
        yield from self.jobs
        if self.queued is not None:
            for jobs in self.queued.values():
                yield from jobs


def host_view(host: HostRecord, load: HostLoad | None) -> HostView:
    """What a pass sees of one host: its size, what is free of it, its devices."""
    if load is None:
        return view_of(host, 0, 0, frozenset())
    return view_of(host, load.slots, load.memory_mb, load.devices)


def view_of(host: HostRecord, used_slots: int, used_mem: int, held: AbstractSet[str]) -> HostView:
    """`host_view` from the load's parts: what active jobs hold of slots and memory and
    which devices ("gpu:0") they hold (the simulator keeps these, not a HostLoad)."""
    free: tuple[str, ...] = ()
    if host.gres:
        free = tuple(
            name
            for kind, ids in gres.host_devices(host.gres).items()
            for name in (gres.grant_name(kind, i) for i in ids)
            if name not in held
        )
    return HostView(
        host.name,
        host.slots,
        host.memory_mb,
        host.slots - used_slots,
        host.memory_mb - used_mem,
        host.attributes,
        host.status is HostStatus.ONLINE,
        host.gres,
        free,
    )


def preemption_view(job: JobRecord) -> tuple[str, str, bool, float, int]:
    """The RunningJob fields preemption reads, from the record."""
    return (
        job.preempted_by,
        job.state.value,
        job.kill_requested,
        job.resumed_time or job.start_time or 0.0,
        job.spec.slots,
    )


PendingMemo = dict[str, tuple[JobRecord, PendingJob]]


def _pending_with_memo(
    state: ClusterState, memo: PendingMemo, deps: Callable[[JobSpec], DepStatus]
) -> tuple[PendingJob, ...]:
    """Pending views, reusing those of unchanged records (records are immutable, so the same
    object means the same job). Jobs with dependencies are always re-evaluated."""
    out = []
    jobs, get = state.jobs, memo.get
    for job_id in state.pending:
        record = jobs[job_id]
        known = get(job_id)
        if known is not None and known[0] is record and not record.spec.dependency:
            out.append(known[1])
            continue
        view = PendingJob(
            record.id,
            record.number,
            record.array_index,
            record.spec,
            deps(record.spec),
            record.submit_time,
        )
        memo[job_id] = (record, view)
        out.append(view)
    if len(memo) > 2 * len(out) + 1024:  # forget jobs that are no longer pending
        keep = {v.job_id for v in out}
        for job_id in [k for k in memo if k not in keep]:
            del memo[job_id]
    return tuple(out)


def snapshot_of(
    state: ClusterState,
    usage: Mapping[str, float] | None = None,
    groups: Mapping[str, str] | None = None,
    memo: PendingMemo | None = None,
    licenses: Mapping[str, int] | None = None,
) -> Snapshot:
    """The scheduler's view of `state`; `usage` and `groups` feed fairshare (the controller's
    `UsageLedger` and `[scheduler] groups`). With `memo` (kept by the caller between
    passes) the view of a pending job whose record has not changed is reused."""
    hosts = []
    running: list[RunningJob] = []
    for host in sorted(state.hosts.values(), key=lambda h: h.name):
        load = state.host_load.get(host.name)
        if load is not None:
            for job_id in sorted(load.jobs):
                running.extend(v for v in running_views(state.jobs[job_id]) if v.host == host.name)
        hosts.append(host_view(host, load))

    def deps(spec: JobSpec) -> DepStatus:
        return evaluate(spec.dependency, state) if spec.dependency else DepStatus.SATISFIED

    if memo is None:
        jobs = tuple(
            PendingJob(j.id, j.number, j.array_index, j.spec, deps(j.spec), j.submit_time)
            for j in (state.jobs[i] for i in state.pending)
        )
    else:
        jobs = _pending_with_memo(state, memo, deps)
    arrays = tuple(
        PendingArray(
            a.id, a.spec, a.pending, a.max_concurrent, a.active, deps(a.spec), a.submit_time
        )
        for a in (state.arrays[n] for n in state.pending_arrays)
        if not a.held
    )
    # Requeued tasks are ordinary pending jobs, but their array's limit still applies.
    numbers = {a.number for a in arrays} | {j.number for j in jobs if j.index is not None}
    limits = {n: (state.arrays[n].max_concurrent, state.arrays[n].active) for n in numbers}
    return Snapshot(
        tuple(hosts),
        dict(state.queues),
        jobs,
        arrays,
        limits,
        tuple(running),
        dict(usage or {}),
        dict(groups or {}),
        licenses=None if licenses is None else free_licenses(state, licenses),
        reservations=tuple(state.reservations.values()),
    )


def free_licenses(state: ClusterState, totals: Mapping[str, int]) -> dict[str, int]:
    """`[[license]]` counts less what active jobs hold (never below zero: a smaller count
    in a new config leaves the running jobs be)."""
    used = state.licenses_in_use()
    return {name: max(0, count - used.get(name, 0)) for name, count in totals.items()}
