"""The scheduler's view of a `ClusterState`, kept up to date event by event.

`snapshot_of` walks every pending job on every pass (reusing unchanged views, but still
walking), so a pass over a long queue costs that queue even when it starts one job. This
cache is fed each applied event (`observe`, a listener like `UsageLedger.observe`) and
touches only what the event names: the job, its host, its queue. A snapshot then costs the
hosts and running jobs that changed, and hands the pass the pending jobs *per queue, in
submission order* (`Snapshot.queued`), which an FCFS-ordered pass reads lazily and stops
reading as soon as the cluster is full or the head blocks.

Events that name no single job (purges, array events, host loss) mark the cache stale, and
the next snapshot rebuilds it in one walk, as `snapshot_of` does. So does an event applied
to the state without being observed (`ClusterState.applied` counts them: a standby's
follower, a recovery), or another state object: the cache can fall back to a full walk,
never show a state it was not fed. tests/sched/test_incremental.py compares it with
`snapshot_of` after every event.

A pending job's view holds its spec as a pass reads it (`scheduled`: without what the job
runs), one spec object for the jobs alike (`SnapshotCache._alike`), where `snapshot_of`
hands each job its own: the pass decides alike on both, and on the cache's it finds what
it finds for a spec (blocked, predicted) once for every job submitted alike.

Validity: `Snapshot.queued` holds live views of the cache's dicts (no copy, that is the
point): a snapshot must be planned before the next event is observed, which the simulator
and the controller's synchronous pass both do.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

from xce.core import events as ev
from xce.core.deps import DepStatus, evaluate
from xce.core.model import JobRecord, JobSpec, JobState, QueueRecord
from xce.core.state import ClusterState
from xce.sched.passes.memo import PassMemo
from xce.sched.snapshot import (
    FreeTable,
    HostView,
    PendingArray,
    PendingJob,
    RunningJob,
    Snapshot,
    host_view,
    running_views,
    scheduled,
)

_ACTIVE = frozenset(s for s in JobState if s.active)
SHIFT = 1 << 40  # order key: job number, then array index (pipeline._groups uses the same)

# What an event changes, by its type (a dict lookup: `observe` runs for every event).
_SUBMIT, _ONE_JOB, _SHAPE, _HOST = 1, 2, 3, 4
_KINDS: dict[type, int] = {
    ev.JobSubmitted: _SUBMIT,  # a new pending job
    # at most the job they name (and its host's load)
    ev.JobStarted: _ONE_JOB,
    ev.JobFinished: _ONE_JOB,
    ev.JobSuspended: _ONE_JOB,
    ev.JobResumed: _ONE_JOB,
    ev.JobKillRequested: _ONE_JOB,
    ev.JobKilled: _ONE_JOB,
    ev.JobRequeued: _ONE_JOB,
    ev.JobUsageReported: _ONE_JOB,
    # one host: a new one, or one whose record changed (its view alone is redone)
    ev.HostRegistered: _HOST,
    ev.HostAvailable: _HOST,
    ev.HostUnavailable: _HOST,
    ev.HostOpened: _HOST,
    ev.HostClosed: _HOST,
    ev.HostDrainStarted: _HOST,
    # the queues
    ev.QueueCreated: _SHAPE,
}


class RunningOrder:
    """Running views in the order a pass reads them (host name, then job id as text, as
    `snapshot_of` walks them), kept sorted as jobs start and end: a start or an end moves
    one entry instead of resorting them all (the simulator's cluster, xce/sched/sim/cluster.py,
    keeps the same order with its views made lazily)."""

    __slots__ = ("_by_job", "_ordered", "_tuple")

    def __init__(self) -> None:
        self._by_job: dict[str, tuple[RunningJob, ...]] = {}  # one view per host
        self._ordered: list[tuple[tuple[str, str], RunningJob]] = []
        self._tuple: tuple[RunningJob, ...] | None = None

    def add(self, job_id: str, views: tuple[RunningJob, ...]) -> None:
        self._by_job[job_id] = views
        self._tuple = None
        ordered = self._ordered
        for view in views:
            insort(ordered, ((view.host, job_id), view))

    def drop(self, job_id: str) -> tuple[RunningJob, ...] | None:
        """Forget the job's views; they are returned (None: it had none)."""
        views = self._by_job.pop(job_id, None)
        if views is not None:
            self._tuple = None
            ordered = self._ordered
            for view in views:
                del ordered[bisect_left(ordered, ((view.host, job_id),))]
        return views

    def views(self) -> tuple[RunningJob, ...]:
        """Every view in order (the same tuple until a job starts or ends)."""
        if self._tuple is None:
            self._tuple = tuple([view for _, view in self._ordered])
        return self._tuple


def order_key(record: JobRecord) -> int:
    index = record.array_index
    return record.number * SHIFT + (0 if index is None else index + 1)


class SnapshotCache:
    """Pending views per queue (submission order), running views per host, host views."""

    def __init__(self) -> None:
        self._stale = True
        self.rebuilds = 0
        self._queues: dict[str, QueueRecord] | None = None  # None: read them again

    # --- feeding ------------------------------------------------------------------------

    def observe(self, event: ev.Event, state: ClusterState) -> None:
        """Listener for an event just applied to `state`."""
        if self._stale:
            return
        if state is not self._state or state.applied != self._seen + 1:
            self._stale = True  # an event applied without us (a follower, a recovery)
            return
        self._seen += 1
        kind = _KINDS.get(type(event))
        if kind == _ONE_JOB:
            self._sync(cast("ev.JobStarted", event).job_id, state)
        elif kind == _SUBMIT:
            self._submitted(str(cast("ev.JobSubmitted", event).number), state)
        elif kind == _HOST:
            self._host_changed(cast("ev.HostRegistered", event).name, state)
        elif kind == _SHAPE:
            self._hosts_dirty = True
            self._queues = None
        else:
            self._stale = True

    def _host_changed(self, name: str, state: ClusterState) -> None:
        """One host joined or its record changed (registration, reachability, open, close,
        drain): only its view is redone, a new one put in its place in name order, so a
        cluster of 10,000 hosts registering or coming back does not rebuild every view
        for each. What passes derived from the old hosts is void all the same."""
        self._memo_void = True
        if self._hosts_dirty:
            return  # every view is rebuilt anyway
        if name in self._host_at:
            self._dirty.add(name)
            return
        views = self._host_list
        at = bisect_left(views, name, key=lambda view: view.name)
        views.insert(at, host_view(state.hosts[name], state.host_load.get(name)))
        for k in range(at, len(views)):
            self._host_at[views[k].name] = k
        self._hosts_moved = True

    def _rebuild(self, state: ClusterState) -> None:
        self.rebuilds += 1
        self._state, self._seen = state, state.applied
        self._queued: dict[str, dict[str, PendingJob]] = {}
        self._last: dict[str, int] = {}
        self._unsorted: set[str] = set()
        self._where: dict[str, str] = {}  # pending job id -> queue
        self._dependent: dict[str, None] = {}  # pending jobs whose view must be re-read
        self._tasks: dict[str, int] = {}  # pending array tasks -> array number
        # `_alike`: one spec object per group of pending jobs alike as a pass reads them,
        # and each job's own spec (held, so its id stays its own) -> that object
        self._specs: dict[JobSpec, JobSpec] = {}
        self._alike_of: dict[int, tuple[JobSpec, JobSpec]] = {}
        self._running = RunningOrder()
        self._hosts_dirty = True  # every host view is rebuilt (a queue event)
        self._dirty: set[str] = set()  # else only these hosts' views (load or record changed)
        self._hosts_moved = False  # a host was inserted: the tuple of views is made anew
        self._memo_void = True  # a host changed: what passes derived is void
        self._hosts: tuple[HostView, ...] = ()
        # the views' free slots and memory, kept beside `_hosts` (a pass copies or borrows
        # it instead of reading 10,000 views: xce/sched/passes/hostpool.py)
        self._free = FreeTable.of(())
        self._host_list: list[HostView] = []
        self._host_at: dict[str, int] = {}  # host name -> its place in _host_list
        self._queues = None
        records = [state.jobs[i] for i in state.pending]
        records.sort(key=order_key)
        for record in records:
            self._add_pending(record, state)
        for load in state.host_load.values():
            for job_id in load.jobs:
                self._add_running(state.jobs[job_id])
        self._stale = False

    def _sync(self, job_id: str, state: ClusterState) -> None:
        """Drop the job's views, then add the one its record calls for now (pending or
        running; none once it has ended)."""
        queue = self._where.pop(job_id, None)
        if queue is not None:
            del self._queued[queue][job_id]
            self._dependent.pop(job_id, None)
            self._tasks.pop(job_id, None)
        views = self._running.drop(job_id)
        if views is not None:
            for view in views:
                self._dirty.add(view.host)
        record = state.jobs.get(job_id)
        if record is None:
            return
        if job_id in state.pending:
            self._add_pending(record, state)
        elif record.state in _ACTIVE and record.host:
            self._add_running(record)

    def _submitted(self, job_id: str, state: ClusterState) -> None:
        """`_sync` for a job just submitted: it is in no view yet."""
        if job_id in state.pending:  # not held
            self._add_pending(state.jobs[job_id], state)

    def _add_pending(self, record: JobRecord, state: ClusterState) -> None:
        queue = record.spec.queue
        jobs = self._queued.get(queue)
        if jobs is None:
            jobs = self._queued[queue] = {}
        key = order_key(record)
        if key < self._last.get(queue, -1):
            self._unsorted.add(queue)  # a requeued job goes back to its place: resort once
        else:
            self._last[queue] = key
        jobs[record.id] = _view(record, state, self._alike(record.spec))
        self._where[record.id] = queue
        if record.spec.dependency:
            self._dependent[record.id] = None
        if record.array_index is not None:
            self._tasks[record.id] = record.number

    def _alike(self, spec: JobSpec) -> JobSpec:
        """The spec a pending job's view holds: its own as a pass reads it (`scheduled`,
        xce/sched/snapshot.py), one object for every pending job alike. Each job submitted
        has its own spec, but what a pass finds for a spec it keeps by the object (a spec
        known blocked, a prediction: xce/sched/passes), so jobs submitted alike one by one
        then cost each further one a lookup instead of a try, as an array's tasks do. A
        job's view is made again at each of its events and, with dependencies, at each
        snapshot: its own spec is remembered. Forgotten whole when it holds many more
        than the jobs pending (the views made keep theirs)."""
        known = self._alike_of.get(id(spec))
        if known is not None:
            return known[1]
        specs, alike_of = self._specs, self._alike_of
        if len(alike_of) > 2 * len(self._where) + 1024:
            specs.clear()
            alike_of.clear()
        view = scheduled(spec)
        view = specs.setdefault(view, view)
        alike_of[id(spec)] = (spec, view)
        return view

    def _add_running(self, record: JobRecord) -> None:
        views = running_views(record)
        self._running.add(record.id, views)
        for view in views:
            self._dirty.add(view.host)

    # --- reading ------------------------------------------------------------------------

    def snapshot(
        self,
        state: ClusterState,
        usage: Mapping[str, float] | None = None,
        groups: Mapping[str, str] | None = None,
    ) -> Snapshot:
        """The same view as `snapshot_of(state, usage, groups)`, pending jobs as `queued`
        (their specs as a pass reads them, shared by jobs alike)."""
        if self._stale or state is not self._state or state.applied != self._seen:
            self._rebuild(state)
        for queue in self._unsorted:
            jobs = self._queued[queue]
            ordered = sorted(
                jobs.values(),
                key=lambda v: v.number * SHIFT + (0 if v.index is None else v.index + 1),
            )
            self._queued[queue] = {v.job_id: v for v in ordered}
            last = ordered[-1] if ordered else None
            self._last[queue] = (
                -1
                if last is None
                else last.number * SHIFT + (0 if last.index is None else last.index + 1)
            )
        self._unsorted.clear()
        for job_id in self._dependent:  # dependency status can change with any event
            record = state.jobs[job_id]
            self._queued[self._where[job_id]][job_id] = _view(
                record, state, self._alike(record.spec)
            )
        if self._hosts_dirty or self._memo_void or self._queues is None:
            # a host or a queue was added or changed (or the cache rebuilt): what passes
            # derived from the old ones is void (xce/sched/passes/memo.py)
            self._memo = PassMemo()
            self._memo_void = False
        if self._hosts_dirty or self._dirty or self._hosts_moved:
            self._refresh_hosts(state)
        if self._queues is None:
            self._queues = dict(state.queues)
        arrays: tuple[PendingArray, ...] = ()
        limits: dict[int, tuple[int | None, int]] = {}
        if state.pending_arrays or self._tasks:
            arrays = tuple(
                PendingArray(
                    a.id,
                    a.spec,
                    a.pending,
                    a.max_concurrent,
                    a.active,
                    _deps(a.spec, state),
                    a.submit_time,
                )
                for a in (state.arrays[n] for n in state.pending_arrays)
                if not a.held
            )
            numbers = {a.number for a in arrays} | set(self._tasks.values())
            limits = {n: (state.arrays[n].max_concurrent, state.arrays[n].active) for n in numbers}
        queued = MappingProxyType({q: jobs.values() for q, jobs in self._queued.items() if jobs})
        # queues, usage and groups are handed over, not copied: the caller makes a new
        # usage map per pass and changes neither of the others between passes
        return Snapshot(
            self._hosts,
            self._queues,
            (),
            arrays,
            limits,
            self._running.views(),
            usage if usage is not None else {},
            groups if groups is not None else {},
            queued=queued,
            reservations=tuple(state.reservations.values()),
            memo=self._memo,
            free=self._free,
        )

    def _refresh_hosts(self, state: ClusterState) -> None:
        """All host views after a host or queue event, else those of the hosts whose
        load changed since the last snapshot."""
        rebuilt = self._hosts_dirty or self._hosts_moved
        if self._hosts_dirty:
            self._host_list = _host_views(state)
            self._host_at = {view.name: k for k, view in enumerate(self._host_list)}
            self._hosts_dirty = False
        else:
            hosts, loads, views, at = state.hosts, state.host_load, self._host_list, self._host_at
            table = self._free
            for name in self._dirty:
                k = at[name]
                old, view = views[k], host_view(hosts[name], loads.get(name))
                views[k] = view
                if not rebuilt:  # the table in step, host by host
                    table.slots[k], table.memory_mb[k] = view.free_slots, view.free_memory_mb
                    table.total += FreeTable.counted(view) - FreeTable.counted(old)
        self._dirty.clear()
        self._hosts_moved = False
        self._hosts = tuple(self._host_list)
        if rebuilt:
            self._free = FreeTable.of(self._hosts)
        self._free.hosts = self._hosts  # the table describes this very tuple


def _deps(spec: JobSpec, state: ClusterState) -> DepStatus:
    return evaluate(spec.dependency, state) if spec.dependency else DepStatus.SATISFIED


def _view(record: JobRecord, state: ClusterState, spec: JobSpec) -> PendingJob:
    """The pending view of `record`, with `spec` (its own as a pass reads it)."""
    return PendingJob(
        record.id,
        record.number,
        record.array_index,
        spec,
        _deps(spec, state),
        record.submit_time,
    )


def _host_views(state: ClusterState) -> list[HostView]:
    return list(
        host_view(host, state.host_load.get(host.name))
        for host in sorted(state.hosts.values(), key=lambda h: h.name)
    )
