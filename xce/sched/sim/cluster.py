"""The simulated cluster as the scheduler sees it, kept by `xce simulate` event by event.

The live controller keeps a `ClusterState` (immutable job records, an index per state,
per-host loads) and feeds a `SnapshotCache` from it: about 15 us of bookkeeping per job,
three times over (submit, start, end), that a simulator replaying millions of jobs pays
for records nobody reads. This class keeps only what a pass reads, in the form the pass
reads it: the pending views in submission order (made once per job, reused by every
pass), the running views in (host, job id) order, made when a pass first reads them, one
`HostView` per host made again when its load changes (or the one it had at that load
before, kept) with the table of every host's free slots and memory that the pass copies
(`FreeTable`), and hands `plan` a `Snapshot` showing
what `SnapshotCache.snapshot` shows for a ClusterState fed the same events (its hosts are a
list kept current, not a tuple). tests/sched/test_simcluster.py replays traces with a real
ClusterState beside it and compares the two snapshots at every pass.

What a simulated job can do is narrow (one queue; submit, start on the hosts the pass
chose, end), and each method refuses what the live state refuses for those (an unknown or
busy job, an allocation that does not start at the placement's host or does not hold the
job's slots, a device the host lacks or another job holds), so a simulator bug cannot
pass unseen.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import cast

from xce.config.scheduler import PredictiveSettings
from xce.core import gres
from xce.core.allocation import check_hosts, host_memory_mb
from xce.core.fastreplace import replacer
from xce.core.model import HostRecord, JobSpec, QueueRecord, ReservationRecord
from xce.core.reservations import check_reservation
from xce.sched.passes.memo import PassMemo
from xce.sched.predict import Predictions
from xce.sched.snapshot import (
    DEFAULT_PREDICTIVE,
    FreeTable,
    HostView,
    LazyViews,
    PendingJob,
    RunningJob,
    Snapshot,
    host_view,
    view_of,
)
from xce.sched.types import Placement

Share = tuple[int, int, int, tuple[str, ...]]  # host index, slots, memory, devices
_with_free = replacer(HostView, "free_slots", "free_memory_mb")
_VIEWS_KEPT = 8192  # host views kept for their load (`snapshot`), then it starts over


class SimCluster:
    """One queue, fixed hosts, advance reservations; jobs pending, running, gone."""

    def __init__(
        self,
        queue: QueueRecord,
        hosts: Sequence[HostRecord],
        reservations: Sequence[ReservationRecord] = (),
        predictions: Predictions | None = None,
        predictive: PredictiveSettings | None = None,
    ) -> None:
        self.queue = queue
        # the run-time history the snapshot hands a predicting pass (xce/sched/predict.py),
        # fed by the replay as jobs start and end
        self.predictions = predictions
        self._predictive = predictive or DEFAULT_PREDICTIVE
        self._queues = {queue.name: queue}
        self.hosts = sorted(hosts, key=lambda h: h.name)  # the pass's host order
        self._at = {h.name: i for i, h in enumerate(self.hosts)}
        if len(self._at) != len(self.hosts):
            raise ValueError("host names must differ")
        n = len(self.hosts)
        self._views: list[HostView] = [host_view(h, None) for h in self.hosts]
        # what every pass copies of the hosts (FreeTable: the views' free slots and memory,
        # kept here as jobs start and end)
        self._table = FreeTable.of(self._views)
        self._free = self._table.slots  # free slots per host
        self._free_mem = self._table.memory_mb  # free memory per host
        self._schedulable = [view.schedulable for view in self._views]
        self._hosts_by_free: dict[int, int] = {}  # free slots -> how many hosts have that
        for free in self._free:
            self._hosts_by_free[free] = self._hosts_by_free.get(free, 0) + 1
        self.most_free = max(self._free, default=0)  # the most free slots on one host
        self._one_host = n == 1  # then most_free is that host's, without counts
        self._devices: list[set[str]] = [set() for _ in range(n)]
        self._dirty: set[int] = set()  # hosts whose view is out of date
        # views of hosts without devices made so far, by (host index, free slots, memory)
        self._seen: dict[tuple[int, int, int], HostView] = {}
        kept: dict[str, ReservationRecord] = {}
        for reservation in reservations:
            check_reservation(reservation, kept)  # what ReservationAdded checks live
            kept[reservation.name] = reservation
        self._reservations = tuple(kept.values())
        self._memo = PassMemo()
        self._kept: Snapshot | None = None  # the snapshot of passes without usage
        self._kept_groups: Mapping[str, str] | None = None  # what it was made with
        self.pending: dict[str, PendingJob] = {}  # submission order
        self._removed = 0  # pending jobs started since `pending` was last compacted
        self._queued = MappingProxyType({queue.name: self.pending.values()})
        self._nothing: Mapping[str, Collection[PendingJob]] = MappingProxyType({})
        # running job -> (spec, start, (host index, slots, memory, devices) per host)
        self._spans: dict[str, tuple[JobSpec, float, tuple[Share, ...]]] = {}
        # the running views (kept apart, so that the snapshot's LazyViews, which reads
        # them, does not refer back to the cluster: a replay's cluster is freed by
        # reference counting, not left to the paused collector)
        self._running = _RunningViews(self.hosts, self._at, self._spans)
        self._lazy = LazyViews(self._running)

    # --- events -------------------------------------------------------------------------

    def submit(self, job: PendingJob) -> None:
        """A job arrives (its view is the one every pass then reads)."""
        if job.spec.queue != self.queue.name:
            raise ValueError(f"job {job.job_id}: no queue {job.spec.queue!r}")
        if job.job_id in self.pending or job.job_id in self._spans:
            raise ValueError(f"job {job.job_id} exists already")
        self.pending[job.job_id] = job

    def start(self, placement: Placement, now: float) -> PendingJob:
        """The pass placed a pending job: it holds its slots, memory and devices on each
        host of the placement until `finish`. Returns its pending view."""
        job_id = placement.job_id
        job = self.pending.get(job_id)
        if job is None:
            raise ValueError(f"job {job_id} is not pending")
        spec = job.spec
        parts = placement.hosts
        if parts:
            check_hosts(job_id, spec, placement.host, parts)
            if len(parts) > 1 or parts[0].slots != spec.slots:
                return self._start_on_hosts(job, placement, now)
        host = placement.host
        i = self._at.get(host)
        if i is None:
            raise ValueError(f"no host {host!r}")
        devices = placement.devices
        if devices:
            self._check_devices(i, job_id, devices)
            self._devices[i].update(devices)
        self._leave(job_id)
        slots, mem = spec.slots, spec.memory_mb
        self._use(i, slots, mem)
        self._spans[job_id] = (spec, now, ((i, slots, mem, devices),))
        running = self._running
        running.views = None
        if running.order is not None:  # (no call while no pass reads the running views)
            running.add(host, job_id)
        return job

    def _start_on_hosts(self, job: PendingJob, placement: Placement, now: float) -> PendingJob:
        """A multi-host start: each host holds its share (`running_views`' parts)."""
        job_id, spec, parts = job.job_id, job.spec, placement.hosts
        # the first host holds the job's own grant, each other host its part's (as live)
        shares = tuple(
            (
                self._index(p.host),
                p.slots,
                host_memory_mb(spec, p.slots),
                placement.devices if k == 0 else p.devices,
            )
            for k, p in enumerate(parts)
        )
        for i, _, _, devices in shares:
            self._check_devices(i, job_id, devices)
        self._leave(job_id)
        self._spans[job_id] = (spec, now, shares)
        for i, slots, mem, devices in shares:
            self._devices[i].update(devices)
            self._use(i, slots, mem)
            self._running.add(self.hosts[i].name, job_id)
        return job

    def _leave(self, job_id: str) -> None:
        """`job_id` is no longer pending. A dict keeps a hole where an entry was until it
        grows past its table, and every pass (its walk starts at the first entry) steps
        over the holes at the front, where started jobs were: on a queue of 20k jobs about
        4 us a pass, more than the pass's own work. So the dict is compacted in place (the
        snapshot's views of it stay valid) when the jobs removed since reach an eighth of
        those left, and at least 2048: at most eight entries copied per job removed."""
        pending = self.pending
        del pending[job_id]
        removed = self._removed = self._removed + 1
        if removed >= 2048 and removed * 8 >= len(pending):
            kept = list(pending.items())
            pending.clear()
            pending.update(kept)
            self._removed = 0

    def _check_devices(self, i: int, job_id: str, devices: tuple[str, ...]) -> None:
        """What `ClusterState` checks of a grant: the host has each device, none held."""
        host = self.hosts[i]
        have = gres.host_devices(host.gres)
        for name in devices:
            kind, device = gres.split_grant(name)
            if device not in have.get(kind, ()):
                raise ValueError(f"job {job_id}: host {host.name} has no device {name}")
        if not self._devices[i].isdisjoint(devices):
            raise ValueError(f"job {job_id}: a device of {host.name} is in use")

    def finish(self, job_id: str) -> JobSpec:
        """A running job ended: what it held is free again. Returns its spec."""
        span = self._spans.pop(job_id, None)
        if span is None:
            raise ValueError(f"job {job_id} is not running")
        running = self._running
        for i, slots, mem, devices in span[2]:
            self._use(i, -slots, -mem)
            if devices:
                self._devices[i].difference_update(devices)
            if running.order is not None:
                running.remove(self.hosts[i].name, job_id)
        running.views = None
        return span[0]

    def _use(self, i: int, slots: int, memory_mb: int) -> None:
        """Host `i` holds `slots` and `memory_mb` more (less when negative); `most_free`
        and the free table's total follow."""
        self._dirty.add(i)
        self._free_mem[i] -= memory_mb
        free, counts = self._free, self._hosts_by_free
        before = free[i]
        after = free[i] = before - slots
        if self._schedulable[i]:
            self._table.total += (after if after > 0 else 0) - (before if before > 0 else 0)
        if self._one_host:
            self.most_free = after
            return
        left = counts[before] - 1
        if left:
            counts[before] = left
        else:
            del counts[before]
        counts[after] = counts.get(after, 0) + 1
        if after > self.most_free:
            self.most_free = after
        elif before == self.most_free and not left:
            self.most_free = max(counts)

    def _index(self, name: str) -> int:
        at = self._at.get(name)
        if at is None:
            raise ValueError(f"no host {name!r}")
        return at

    def _device_view(self, i: int) -> HostView:
        """Host `i`'s view made again from its load (`view_of`): a host with devices (one
        without is copied with its free slots and memory, `snapshot`)."""
        host = self.hosts[i]
        return view_of(
            host,
            host.slots - self._free[i],
            host.memory_mb - self._free_mem[i],
            self._devices[i],
        )

    # --- reading ------------------------------------------------------------------------

    def snapshot(
        self, usage: Mapping[str, float] | None = None, groups: Mapping[str, str] | None = None
    ) -> Snapshot:
        """What `SnapshotCache.snapshot` shows for a ClusterState fed the same events.
        Its hosts, running and pending jobs are live views of this cluster, and without
        `usage` it is the same object every pass (a pass reads it whole before it
        returns): plan the snapshot before the next event, as the controller's cache asks
        too, and do not keep it."""
        dirty = self._dirty
        if dirty:
            views, hosts, free, free_mem = self._views, self.hosts, self._free, self._free_mem
            seen = self._seen
            for i in dirty:  # as its load now gives it
                if hosts[i].gres:
                    views[i] = self._device_view(i)
                    continue
                # a host without devices changes only in its free slots and memory: the
                # view it had with those is taken again (hosts go through a few loads over
                # and over; a view is immutable), else its last one copied with them
                load = (i, free[i], free_mem[i])
                view = seen.get(load)
                if view is None:
                    if len(seen) >= _VIEWS_KEPT:
                        seen.clear()
                    view = seen[load] = _with_free(views[i], load[1], load[2])
                views[i] = view
            dirty.clear()
        if usage is None and self.pending:  # the same object, kept current, every pass
            kept = self._kept
            if kept is None or self._kept_groups is not groups:
                kept = self._kept = self._snapshot({}, groups)
                self._kept_groups = groups
            return kept
        return self._snapshot(usage if usage is not None else {}, groups)

    def _snapshot(self, usage: Mapping[str, float], groups: Mapping[str, str] | None) -> Snapshot:
        return Snapshot(
            self._views,
            self._queues,
            (),
            (),
            {},
            self._lazy,
            usage,
            groups if groups is not None else {},
            queued=self._queued if self.pending else self._nothing,
            reservations=self._reservations,
            predictions=self.predictions,
            predictive=self._predictive,
            memo=self._memo,  # hosts and queue never change here
            free=self._table,
        )


class _RunningViews:
    """The running views of a `SimCluster` in (host, job id) order, as `running_views`
    makes them from a record: each made when first read and kept, in order, while the job
    runs (an FCFS or first-fit pass reads none: it times no reservation and tallies no
    usage), so a read makes only the views of the jobs started since the last one.
    Shares the cluster's hosts and running jobs, refers to nothing else."""

    __slots__ = ("_at", "_hosts", "_listed", "_spans", "_unmade", "order", "views")

    def __init__(
        self,
        hosts: Sequence[HostRecord],
        at: Mapping[str, int],
        spans: Mapping[str, tuple[JobSpec, float, tuple[Share, ...]]],
    ) -> None:
        self._hosts, self._at, self._spans = hosts, at, spans
        # (host name, job id) of every share, sorted; None until a pass first reads the
        # views (then kept in order as jobs start and end)
        self.order: list[tuple[str, str]] | None = None
        # the views in that order, None where not read yet (the keys in `_unmade`)
        self._listed: list[RunningJob | None] = []
        self._unmade: set[tuple[str, str]] = set()
        self.views: tuple[RunningJob, ...] | None = ()  # None: to make again

    def add(self, host: str, job_id: str) -> None:
        """A share of a job that started (its view made when they are next read)."""
        self.views = None
        order = self.order
        if order is not None:
            key = (host, job_id)
            at = bisect_left(order, key)
            order.insert(at, key)
            self._listed.insert(at, None)
            self._unmade.add(key)

    def remove(self, host: str, job_id: str) -> None:
        """A share of a job that ended."""
        self.views = None
        order = self.order
        if order is not None:
            key = (host, job_id)
            at = bisect_left(order, key)
            del order[at]
            del self._listed[at]
            self._unmade.discard(key)

    def __call__(self) -> tuple[RunningJob, ...]:
        views = self.views
        if views is None:
            order, make = self.order, self._make
            if order is None:  # first read: keep the order and the views from now on
                hosts = self._hosts
                order = self.order = sorted(
                    (hosts[i].name, job_id)
                    for job_id, (_, _, shares) in self._spans.items()
                    for i, _, _, _ in shares
                )
                self._listed = [make(key) for key in order]
            listed = self._listed
            unmade = self._unmade
            if unmade:
                for key in unmade:
                    listed[bisect_left(order, key)] = make(key)
                unmade.clear()
            views = self.views = tuple(cast("list[RunningJob]", listed))  # all made now
        return views

    def _make(self, key: tuple[str, str]) -> RunningJob:
        host, job_id = key
        spec, start, shares = self._spans[job_id]
        at = self._at[host]
        for k, (i, slots, mem, _) in enumerate(shares):
            if i == at:
                return RunningJob(
                    job_id,
                    spec.user,
                    spec.queue,
                    host,
                    slots,
                    mem,
                    start,
                    spec.walltime_s,
                    "",
                    "RUN",
                    False,
                    start,
                    spec.slots,
                    k > 0,
                )
        raise AssertionError(f"job {job_id} holds nothing on {host}")
