"""The simulator's own cluster (xce/sched/sim/cluster.py) shows the pass what the live
controller's would: a real `ClusterState`, fed the same events as the simulator makes them
(JobSubmitted, JobStarted, JobFinished), with its `SnapshotCache` and `UsageLedger`, and a
fresh `snapshot_of`, must give at every pass the same hosts, running jobs, pending jobs in
the same order, usage, reservations, and the same plan, on one host and several, jobs
spanning hosts, GPUs, maintenance reservations, every policy preset.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import ClassVar

import pytest

from xce.core import events as ev
from xce.core.deps import DepStatus
from xce.core.errors import XceError
from xce.core.model import (
    HostAdmin,
    HostRecord,
    HostSlots,
    JobSpec,
    QueueRecord,
    ReservationRecord,
)
from xce.core.state import ClusterState
from xce.sched import plugins
from xce.sched.incremental import SnapshotCache
from xce.sched.passes import hostpool
from xce.sched.passes.hostpool import HostPool
from xce.sched.passes.pipeline import plan
from xce.sched.sim import cluster as simcluster
from xce.sched.sim.cluster import SimCluster
from xce.sched.sim.inputs import (
    HOST_MEMORY_MB,
    PRESETS,
    SpecMemo,
    host_names,
    parse_reservation,
    plugins_for,
    spec_for,
)
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfJob
from xce.sched.sim.workload import synthetic
from xce.sched.snapshot import FreeTable, HostView, PendingJob, Snapshot, snapshot_of, view_of
from xce.sched.types import Placement
from xce.sched.usage import UsageLedger


def pending(snapshot: Snapshot) -> list[PendingJob]:
    return list(snapshot.pending_jobs())


class StateWitness:
    """A live ClusterState beside the simulator, checked at every pass."""

    def __init__(
        self,
        jobs: list[SwfJob],
        policy: str,
        hosts: int,
        slots: int,
        gpus: int = 0,
        reservations: tuple[ReservationRecord, ...] = (),
    ) -> None:
        first = jobs[0].submit
        self.plugins = plugins_for(policy)
        self.state, self.cache = ClusterState(), SnapshotCache()
        self.ledger = UsageLedger(3600.0)
        self.groups = {j.user: j.group for j in jobs}
        self.passes = 0
        self.apply(ev.QueueCreated(first, QueueRecord("normal", plugins=self.plugins)))
        devices = (("gpu", ",".join(map(str, range(gpus)))),) if gpus else ()
        for name in host_names(hosts):
            self.apply(ev.HostRegistered(first, name, slots, HOST_MEMORY_MB, (), devices))
        for reservation in reservations:
            self.apply(ev.ReservationAdded(first, reservation))

    def apply(self, event: ev.Event) -> None:
        self.state.apply(event)
        self.cache.observe(event, self.state)
        self.ledger.observe(event, self.state)

    def submitted(self, now: float, number: int, spec: JobSpec) -> None:
        self.apply(ev.JobSubmitted(now, number, spec))

    def started(self, now: float, placement: Placement) -> None:
        self.apply(
            ev.JobStarted(now, placement.job_id, placement.host, placement.devices, placement.hosts)
        )

    def finished(self, now: float, job_id: str, killed: bool) -> None:
        if killed:
            self.apply(ev.JobFinished(now, job_id, 0, None, 9, reason="walltime exceeded"))
        else:
            self.apply(ev.JobFinished(now, job_id, 0, 0))

    def planning(self, snapshot: Snapshot, now: float) -> None:
        self.passes += 1
        fair = any(name.startswith("fairshare") for name in self.plugins)
        usage = self.ledger.usage(now) if fair else None
        live = self.cache.snapshot(self.state, usage, self.groups)
        fresh = snapshot_of(self.state, usage, self.groups)
        for other in (live, fresh):
            assert tuple(snapshot.hosts) == other.hosts
            assert tuple(snapshot.running) == other.running
            assert pending(snapshot) == pending(other)
            assert dict(snapshot.usage) == dict(other.usage)
            assert snapshot.queues == other.queues
            assert snapshot.reservations == other.reservations
            assert (snapshot.arrays, snapshot.array_limits) == (other.arrays, other.array_limits)
        # what a pass copies of the hosts is what their views show
        assert snapshot.free == FreeTable.of(fresh.hosts)
        assert plan(snapshot, now) == plan(fresh, now)


def run(
    jobs: list[SwfJob],
    policy: str,
    hosts: int,
    slots: int,
    gpus: int = 0,
    reservations: tuple[ReservationRecord, ...] = (),
) -> StateWitness:
    witness = StateWitness(jobs, policy, hosts, slots, gpus, reservations)
    result = simulate(
        jobs,
        hosts,
        slots,
        policy,
        gpus_per_host=gpus,
        reservations=reservations,
        witness=witness,
    )
    assert witness.passes == result.passes > 0
    return witness


@pytest.mark.parametrize("policy", sorted(PRESETS))
@pytest.mark.parametrize(
    ("hosts", "slots", "max_procs", "interarrival"),
    [(1, 16, 16, 40.0), (4, 8, 8, 15.0), (3, 8, 24, 20.0)],  # the last: jobs span hosts
)
def test_same_view_as_the_live_state(
    policy: str, hosts: int, slots: int, max_procs: int, interarrival: float
) -> None:
    jobs = synthetic(250, max_procs=max_procs, seed=7, mean_interarrival_s=interarrival)
    witness = run(jobs, policy, hosts, slots)
    assert not witness.state.pending and not witness.state.host_load  # all ran and ended


def test_same_view_with_gpus_and_a_maintenance_window() -> None:
    rng = random.Random(3)
    jobs = [
        replace(j, gpus=rng.choice((0, 0, 1, 2)))
        for j in synthetic(200, max_procs=8, seed=3, mean_interarrival_s=30)
    ]
    window = parse_reservation("2000-5000@n2", 1, jobs[0].submit, 2)
    for policy in ("easy", "first-fit"):
        run(jobs, policy, 2, 8, gpus=2, reservations=(window,))


def test_refuses_what_the_live_state_refuses() -> None:
    cluster = SimCluster(QueueRecord("normal"), [])
    spec = JobSpec(user="u", queue="normal", slots=1)
    job = PendingJob("1", 1, None, spec, DepStatus.SATISFIED, 0.0)
    cluster.submit(job)
    with pytest.raises(ValueError, match="exists already"):
        cluster.submit(job)
    with pytest.raises(ValueError, match="no host"):
        cluster.start(Placement("1", "n1"), 0.0)
    assert cluster.pending == {"1": job}  # a refused start changes nothing
    with pytest.raises(ValueError, match="not pending"):
        cluster.start(Placement("2", "n1"), 0.0)
    with pytest.raises(ValueError, match="not running"):
        cluster.finish("1")
    with pytest.raises(ValueError, match="no queue"):
        cluster.submit(PendingJob("3", 3, None, replace(spec, queue="other"), job.deps, 0.0))


def test_most_free_follows_every_start_and_end() -> None:
    """`most_free` (what decides whether a pass may start anything) is kept by counts of
    hosts per free slots; it must equal the freest host's view at every step."""
    rng = random.Random(5)
    hosts = [HostRecord(f"h{i}", size, 64_000) for i, size in enumerate((4, 8, 8, 16, 2))]
    cluster = SimCluster(QueueRecord("normal"), hosts)
    running: list[str] = []
    for number in range(1, 400):
        if running and (rng.random() < 0.5 or cluster.most_free == 0):
            cluster.finish(running.pop(rng.randrange(len(running))))
        else:
            views = cluster.snapshot().hosts
            fits = [v for v in views if v.free_slots > 0]
            if not fits:
                continue
            host = rng.choice(fits)
            slots = rng.randint(1, host.free_slots)
            spec = JobSpec(user="u", queue="normal", slots=slots)
            job_id = str(number)
            cluster.submit(PendingJob(job_id, number, None, spec, DepStatus.SATISFIED, 0.0))
            cluster.start(Placement(job_id, host.name), float(number))
            running.append(job_id)
        assert cluster.most_free == max(v.free_slots for v in cluster.snapshot().hosts)
        if number in (200, 399):  # running views read late: kept in order from then on
            views = list(cluster.snapshot().running)
            keys = [(v.host, v.job_id) for v in views]
            assert keys == sorted(keys) and {v.job_id for v in views} == set(running)


def test_jobs_alike_share_one_spec() -> None:
    one, two, other = (
        SwfJob(1, 0.0, 10.0, 4, 600, "u1", "g1"),
        SwfJob(2, 5.0, 99.0, 4, 600, "u1", "g1"),
        SwfJob(3, 5.0, 10.0, 4, 601, "u1", "g1"),
    )
    memo = SpecMemo(slots=8, limit=2)
    assert memo(one) is memo(two) and memo(one) == spec_for(one, slots=8)
    assert memo(other) is not memo(one) and memo(other).walltime_s == 601
    memo(SwfJob(4, 5.0, 10.0, 2, 601, "u2", "g1"))  # a third shape: the memo starts over
    assert memo(one) == spec_for(one, slots=8)


def test_spec_for_names_every_field_it_sets() -> None:
    """spec_for passes JobSpec's fields by position (cheaper): the same spec as by name."""
    narrow = SwfJob(1, 0.0, 10.0, 4, 600, "u1", "g1", gpus=2)
    wide = SwfJob(2, 0.0, 10.0, 12, None, "u2", "g2")
    assert spec_for(narrow, slots=8) == JobSpec(
        user="u1",
        queue="normal",
        name="swf",
        command=None,
        slots=4,
        walltime_s=600,
        gres=(("gpu", "2"),),
    )
    assert spec_for(wide, queue="q", slots=8) == JobSpec(
        user="u2",
        queue="q",
        name="swf",
        command=None,
        slots=12,
        walltime_s=None,
        resources="span[ptile=8]",
    )


def test_the_spec_memo_is_used_only_where_jobs_are_often_alike() -> None:
    """Decided from the trace's first jobs: at least one in eight alike an earlier one."""
    unique = [SwfJob(k, 0.0, 10.0, 4, 600 + k, "u1", "g1") for k in range(1, 101)]
    assert not SpecMemo.worth_it(unique, trial=64)
    alike = [SwfJob(k, 0.0, 10.0, 4, 600 + k % 4, "u1", "g1") for k in range(1, 101)]
    assert SpecMemo.worth_it(alike, trial=64)
    # 8 of the first 64 alike: just worth it; 7: not
    edge = [SwfJob(k, 0.0, 10.0, 4, 600 + min(k, 56), "u1", "g1") for k in range(1, 101)]
    assert SpecMemo.worth_it(edge, trial=64)
    edge = [SwfJob(k, 0.0, 10.0, 4, 600 + min(k, 57), "u1", "g1") for k in range(1, 101)]
    assert not SpecMemo.worth_it(edge, trial=64)
    assert not SpecMemo.worth_it([])
    memo = SpecMemo(slots=8)
    specs = [memo(job) for job in alike]
    assert len({id(spec) for spec in specs}) == 4
    assert specs == [spec_for(job, slots=8) for job in alike]


def test_a_replay_shares_specs_only_when_the_trace_repeats_itself() -> None:
    """The replay's jobs (what its witness sees submitted) share spec objects on a trace
    of alike jobs, and each has its own on a trace of unlike ones, with the same specs."""
    alike = [SwfJob(k, float(k), 10.0, 4, 600 + k % 4, "u1", "g1") for k in range(1, 201)]
    unlike = [SwfJob(k, float(k), 10.0, 4, 600 + k, "u1", "g1") for k in range(1, 201)]
    for jobs, shapes in ((alike, 4), (unlike, 200)):
        specs = _Specs()
        simulate(jobs, hosts=1, slots=8, policy="fcfs", witness=specs)
        assert len({id(spec) for spec in specs.seen}) == shapes
        assert specs.seen == [spec_for(job, slots=8) for job in jobs]


class _Specs:
    """A witness that keeps the spec of every job submitted."""

    def __init__(self) -> None:
        self.seen: list[JobSpec] = []

    def submitted(self, now: float, number: int, spec: JobSpec) -> None:
        self.seen.append(spec)

    def started(self, now: float, placement: Placement) -> None: ...
    def finished(self, now: float, job_id: str, killed: bool) -> None: ...
    def planning(self, snapshot: Snapshot, now: float) -> None: ...


def test_allocations_are_judged_as_the_live_state_judges_them() -> None:
    """Starts the pass would never make, refused or taken as ClusterState takes them."""
    gpus = (("gpu", "0,1"),)
    hosts = [HostRecord(name, 8, 64_000, gres=gpus) for name in ("n1", "n2")]
    live = ClusterState()
    live.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    for host in hosts:
        live.apply(ev.HostRegistered(0.0, host.name, 8, 64_000, (), gpus))
    cluster = SimCluster(QueueRecord("normal"), hosts)
    number = 0

    def both(spec: JobSpec, placement: Placement) -> None:
        nonlocal number
        number += 1
        job_id = str(number)
        placement = replace(placement, job_id=job_id)
        live.apply(ev.JobSubmitted(0.0, number, spec))
        cluster.submit(PendingJob(job_id, number, None, spec, DepStatus.SATISFIED, 0.0))
        refused = []
        for start in (
            lambda: live.apply(
                ev.JobStarted(0.0, job_id, placement.host, placement.devices, placement.hosts)
            ),
            lambda: cluster.start(placement, 0.0),
        ):
            try:
                start()
                refused.append(False)
            except (ValueError, XceError):  # the live state's errors, the simulator's
                refused.append(True)
        assert refused[0] == refused[1], (placement, refused)
        if not refused[0]:
            assert tuple(cluster.snapshot().hosts) == snapshot_of(live).hosts

    plain = JobSpec(user="u", queue="normal", slots=4)
    both(plain, Placement("", "n1", hosts=(HostSlots("n2", 4),)))  # not at its first host
    both(plain, Placement("", "n1", ("gpu:7",)))  # a device n1 lacks
    both(replace(plain, exclusive=True), Placement("", "n1", hosts=(HostSlots("n1", 8),)))
    both(plain, Placement("", "n2", ("gpu:0",)))
    both(plain, Placement("", "n2", ("gpu:0",)))  # held by the job before
    wide = replace(plain, slots=4, gres=(("gpu", "1"),))
    both(  # gone: n1 is whole-held; a two-host start elsewhere with grants per host
        wide,
        Placement("", "n2", ("gpu:1",), hosts=(HostSlots("n2", 2, ("gpu:1",)), HostSlots("n1", 2))),
    )


def test_the_pending_jobs_stay_in_order_through_compaction() -> None:
    """Started jobs leave holes in the pending dict, which is compacted in place now and
    then (`SimCluster._leave`): the order, the snapshot kept across passes and its view
    of the queue stay right through it."""
    cluster = SimCluster(QueueRecord("normal"), [HostRecord("n1", 10**6, 10**9)])
    spec = JobSpec(user="u", queue="normal", slots=1)
    for number in range(1, 6001):
        cluster.submit(PendingJob(str(number), number, None, spec, DepStatus.SATISFIED, 0.0))
    kept = cluster.snapshot()
    rng = random.Random(4)
    waiting = list(range(1, 6001))
    for step in range(5000):  # mostly the oldest, now and then one from the middle
        number = waiting.pop(0 if step % 5 else rng.randrange(len(waiting)))
        cluster.start(Placement(str(number), "n1"), 1.0)
    assert cluster._removed < 2048  # compacted at least twice on the way
    snapshot = cluster.snapshot()
    assert snapshot is kept  # the same object, kept current
    assert snapshot.queued is not None
    assert [job.number for job in snapshot.queued["normal"]] == waiting
    assert [job.number for job in snapshot.pending_jobs()] == waiting
    assert list(cluster.pending) == [str(number) for number in waiting]


def test_the_free_table_leaves_out_hosts_that_take_no_jobs() -> None:
    """A pass copies the simulator's free table instead of reading the views: the same
    free slots, memory and total as the views give, a closed or lost host's free slots
    not counted in the total, through starts and ends."""
    hosts = [
        HostRecord("a", 8, 16_000),
        HostRecord("b", 4, 8_000, admin=HostAdmin.CLOSED),
        HostRecord("c", 4, 8_000, reachable=False),
        HostRecord("d", 2, 4_000),
    ]
    cluster = SimCluster(QueueRecord("normal"), hosts)
    # (a job on the closed host: one that ran there before it was closed, live)
    started = ((4, 1_000, "a"), (2, 500, "d"), (2, 200, "b"))
    for number, (slots, mem, host) in enumerate(started, 1):
        spec = JobSpec("u1", "normal", slots=slots, memory_mb=mem)
        cluster.submit(PendingJob(str(number), number, None, spec, DepStatus.SATISFIED, 0.0))
        cluster.start(Placement(str(number), host, ()), 0.0)
    for finished in ((), ("1",), ("2", "3")):
        for job_id in finished:
            cluster.finish(job_id)
        snapshot = cluster.snapshot()
        assert snapshot.free == FreeTable.of(snapshot.hosts)
        ours, theirs = HostPool(snapshot, 0.0), HostPool(replace(snapshot, free=None), 0.0)
        assert (ours.free_slots, ours.free_mem, ours.total_free_slots) == (
            theirs.free_slots,
            theirs.free_mem,
            theirs.total_free_slots,
        )
        assert ours.free_slots is not snapshot.free.slots  # a pass's own copy
    assert snapshot.free.total == 8 + 2  # hosts a and d, all free again


def test_a_snapshot_copied_with_other_hosts_is_planned_from_its_views() -> None:
    """The free table describes the host views it was kept beside: a snapshot copied with
    other views (as preemption's resume step copies one) is planned from those, not from
    a table that no longer describes them (from the second review)."""
    cluster = SimCluster(QueueRecord("normal"), [HostRecord("a", 4, 8_000)])
    spec = JobSpec("u1", "normal", slots=4)
    cluster.submit(PendingJob("1", 1, None, spec, DepStatus.SATISFIED, 0.0))
    snapshot = cluster.snapshot()
    assert plan(snapshot, 0.0).placements  # the table says 4 free: it starts
    full = tuple(replace(view, free_slots=0) for view in snapshot.hosts)
    copied = replace(snapshot, hosts=full)  # the table is carried over (compare=False)
    assert copied.free is snapshot.free
    assert plan(copied, 0.0, explain=False).placements == []
    assert plan(copied, 0.0).placements == []


@pytest.mark.parametrize("kept", [3, 8192])  # 3: the views kept start over again and again
def test_a_host_view_comes_back_with_its_load(monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    """A host without devices whose load returns to one it had gets the view it had then
    (`SimCluster.snapshot` keeps them): equal to the view its load gives, slots and
    memory both, whether kept or made again."""
    monkeypatch.setattr(simcluster, "_VIEWS_KEPT", kept)
    rng = random.Random(8)
    records = [HostRecord(f"h{i}", 4, 8_000) for i in range(3)]
    cluster = SimCluster(QueueRecord("normal"), records)
    running: dict[str, tuple[str, int, int]] = {}
    used = {r.name: [0, 0] for r in records}
    reused = 0
    seen: dict[tuple[str, int, int], HostView] = {}
    for number in range(1, 600):
        room = [r.name for r in records if used[r.name][0] < 4]
        if running and (rng.random() < 0.5 or not room):
            job_id = rng.choice(sorted(running))
            host, slots, mem = running.pop(job_id)
            cluster.finish(job_id)
            used[host][0] -= slots
            used[host][1] -= mem
        else:
            host = rng.choice(room)
            slots = rng.randint(1, 4 - used[host][0])
            mem = rng.choice((0, 1_000, 2_000))  # same slots, other memory: another view
            spec = JobSpec(user="u", queue="normal", slots=slots, memory_mb=mem)
            job_id = str(number)
            cluster.submit(PendingJob(job_id, number, None, spec, DepStatus.SATISFIED, 0.0))
            cluster.start(Placement(job_id, host), float(number))
            running[job_id] = (host, slots, mem)
            used[host][0] += slots
            used[host][1] += mem
        for record, view in zip(records, cluster.snapshot().hosts, strict=True):
            slots_used, mem_used = used[record.name]
            assert view == view_of(record, slots_used, mem_used, ())
            load = (record.name, slots_used, mem_used)
            reused += seen.get(load) is view
            seen[load] = view
    assert reused > 1000  # most views were ones seen before


class _FailsAfterATake:
    """A score whose key fails once the pass has placed a job (a plugin's bug)."""

    name: ClassVar[str] = "test-fails-after-a-take"
    kind: ClassVar[str] = "score"
    dynamic: ClassVar[bool] = True
    ranks: ClassVar[bool] = True
    improving: ClassVar[bool] = False

    def key(self, pool: HostPool, i: int) -> tuple:
        if pool.placements:
            raise RuntimeError("the plugin failed")
        return (-pool.free_slots[i],)


@pytest.mark.parametrize("fails", [False, True])
def test_a_pass_gives_back_the_free_table_it_borrowed(
    fails: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan` lends the pass the simulator's own free table (no copy per pass, on a
    cluster of many hosts: here of any): after the pass, placements made or a plugin
    failing midway, it is as it was."""
    monkeypatch.setattr(hostpool, "BORROW_ABOVE", 0)
    name = "test-fails-after-a-take" if fails else "spread"
    registry = plugins.PluginRegistry([*plugins.builtin_plugins(), _FailsAfterATake])
    hosts = [HostRecord(f"h{i}", 4, 8_000) for i in range(3)]
    cluster = SimCluster(QueueRecord("normal", plugins=(name,)), hosts)
    cluster.submit(PendingJob("1", 1, None, JobSpec("u", "normal", slots=3), DepStatus.SATISFIED))
    cluster.start(Placement("1", "h1"), 0.0)
    for number, slots in ((2, 2), (3, 1), (4, 3)):  # three shapes: each ranked anew
        spec = JobSpec("u", "normal", slots=slots, memory_mb=1_000)
        cluster.submit(PendingJob(str(number), number, None, spec, DepStatus.SATISFIED))
    snapshot = cluster.snapshot()
    table = snapshot.free
    assert table is not None
    lists, before = (table.slots, table.memory_mb), (table.slots.copy(), table.memory_mb.copy())
    if fails:
        with pytest.raises(RuntimeError, match="the plugin failed"):
            plan(snapshot, 1.0, False, registry)
    else:
        assert len(plan(snapshot, 1.0, False, registry).placements) == 3
    assert (table.slots, table.memory_mb) == before  # every take given back
    assert (table.slots, table.memory_mb) == tuple(map(list, lists))
    assert table.slots is lists[0] and table.memory_mb is lists[1]  # lent, not copied
    assert snapshot.free == FreeTable.of(cluster.snapshot().hosts)


@pytest.mark.parametrize("policy", sorted(PRESETS))
def test_passes_that_borrow_the_free_table_replay_alike(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pass borrowing the simulator's free table (as on a cluster of many hosts):
    the same views as the live state at every pass (the table given back each time) and
    the same starts as passes that copy it; jobs span hosts."""
    jobs = synthetic(250, max_procs=24, seed=11, mean_interarrival_s=20)
    copied = simulate(jobs, 3, 8, policy)
    monkeypatch.setattr(hostpool, "BORROW_ABOVE", 0)
    witness = run(jobs, policy, 3, 8)
    borrowed = simulate(jobs, 3, 8, policy)
    assert not witness.state.pending and not witness.state.host_load
    assert [(o.start, o.host) for o in borrowed.outcomes] == [
        (o.start, o.host) for o in copied.outcomes
    ]
