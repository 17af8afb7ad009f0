"""The scheduling pass: order pending jobs -> filter hosts -> score hosts -> place or reserve.

`plan(snapshot, now)` is pure: it reads the snapshot and returns a `Plan`, and the live
controller and the simulator (xce/sched/sim/simulate.py) both call it, so they decide alike.

Queues are taken in strict priority order (higher `priority` first). Within one priority,
the queues that order by `fcfs` are merged by submission, then each queue with another
order plugin (fairshare) follows, by name. Every queue uses its own plugins
(`QueueRecord.plugins`, see xce/sched/plugins). Jobs of the same *shape* share the work of
finding hosts (xce/sched/passes/hostpool.py), so a pass is near linear in pending jobs.

The pass holds its parts, one module a part, each handed what it needs when the pass is
made (none inherits another): xce/sched/passes/tallies.py (the plan so far, the EASY
reservation, the running counts), hosts.py (hosts for a shape), spread.py (multi-host
jobs), place.py (one job or array: gates, placement, commit), and this module (the pass
driver: queue order, the explained and the quiet loop).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from itertools import chain
from operator import attrgetter

from xce.core.deps import DepStatus
from xce.core.model import JobSpec
from xce.sched import reasons as why
from xce.sched.passes import multihost
from xce.sched.passes.advance import AdvanceGate
from xce.sched.passes.hostpool import HostPool, OrderedCandidates
from xce.sched.passes.hosts import HostSearch
from xce.sched.passes.place import JobPlacer
from xce.sched.passes.reservation import Reservation
from xce.sched.passes.spread import SpreadPlacer
from xce.sched.passes.tallies import PassTallies
from xce.sched.plugins import PluginRegistry, QueuePolicy, builtin
from xce.sched.plugins.base import Item, OrderContext
from xce.sched.predict import expecter, per_alike, predictor
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import PendingJob, Snapshot
from xce.sched.types import Placement, Plan

_SATISFIED = DepStatus.SATISFIED  # (a name: an enum member's lookup costs ~70 ns a pass)
INFINITE = float("inf")
_SPEC = attrgetter("spec")


def _peeked(ordered: Iterable[Item], watch: bool) -> tuple[Iterator[Item] | None, Item | None]:
    """(the items of `ordered`, None when there are none; the first of them when `watch`,
    else None): the loops below switch to the shortest-first order before any item but
    that first one."""
    todo = iter(ordered)
    if not watch:
        return todo, None
    head = next(todo, None)
    return (None, None) if head is None else (chain((head,), todo), head)


def plan(
    snapshot: Snapshot, now: float, explain: bool = True, registry: PluginRegistry | None = None
) -> Plan:
    """Placements to make now on `snapshot`, why the rest waits, and any reservation.

    With `explain=False` (the simulator) the same placements come back without a reason
    for every waiting job: the pass then stops as soon as nothing more can start (the
    cluster is full, or a strict FCFS queue blocks) instead of naming why each of the
    rest waits, so its cost follows the jobs it tries, not the length of the queue.
    `registry` names the plugins queues may choose (the built-in ones by default)."""
    scheduling = SchedulingPass(snapshot, now, explain, registry, borrow=True)
    pool = scheduling.pool
    try:
        return scheduling.run()
    finally:
        # the free table the snapshot's maker lent the pass, as it was (HostPool)
        pool.give_back()
        # candidate sets that see every placement (`pack`) and the pool refer to each
        # other: dropped here, reference counting frees the pass without the cyclic
        # collector (which `xce simulate` pauses)
        pool.improving_sets.clear()


class SchedulingPass:
    """One pass over one snapshot; not reusable.

    It holds its parts, each handed what it needs when made: `tallies` (the plan so far,
    the one EASY reservation, the running counts: xce/sched/passes/tallies.py), `hosts`
    (filters, candidate sets per shape, devices: hosts.py), and, made when first needed
    (`_placers`), `spread` (multi-host jobs: spread.py) and `placer` (one job or array:
    place.py). The pass itself orders
    the queues' jobs and runs the explained or the quiet loop."""

    __slots__ = (
        "_no_reserve",
        "explain",
        "hosts",
        "now",
        "placer",
        "policies",
        "pool",
        "snapshot",
        "tallies",
    )

    def __init__(
        self,
        snapshot: Snapshot,
        now: float,
        explain: bool = True,
        registry: PluginRegistry | None = None,
        borrow: bool = False,
    ) -> None:
        """`borrow`: the pass's pool borrows the snapshot's free table (`HostPool`); its
        caller gives it back (`plan` does)."""
        self.snapshot = snapshot
        self.now = now
        self.explain = explain
        pool = self.pool = HostPool(snapshot, now, borrow)
        # Advance reservations (xce/sched/passes/advance.py); None when the cluster has none, so
        # a pass without them costs what it did before.
        gate = AdvanceGate(snapshot.reservations, pool, now) if snapshot.reservations else None
        plugins = registry or builtin()
        memo = snapshot.memo
        # (the memo's registry compared here: a call of `claim` per pass was not free)
        memo = (
            memo if memo is not None and (memo.registry is plugins or memo.claim(plugins)) else None
        )
        known = memo.policies if memo is not None else None
        if known is None:
            known = self._policies(plugins)
            if memo is not None:
                memo.policies = known
        policies, tally, self._no_reserve, limits = known
        self.policies = policies
        tallies = self.tallies = PassTallies(snapshot, now, tally, limits)
        predictions = snapshot.predictions
        if predictions is not None:
            predicting = frozenset(n for n, p in policies.items() if p.predicts)
            if predicting:
                tallies.predict = predictor(predictions, predicting)
                tallies.starved = set()
                pool.expect = expecter(predictions, now)
        self.hosts = HostSearch(snapshot, pool, policies, memo, gate, tallies)
        # the placers, made when first needed (`_placers`): a pass of a replay whose jobs
        # all take the quiet loop's quick route (most of them) makes neither
        self.placer: JobPlacer | None = None

    def _placers(self) -> JobPlacer:
        """The single-job placer (made with the spread placer it hands multi-host jobs to
        on the first call)."""
        placer = self.placer
        if placer is None:
            hosts, tallies = self.hosts, self.tallies
            placer = self.placer = JobPlacer(hosts, SpreadPlacer(hosts, tallies), tallies)
        return placer

    @property
    def spread(self) -> SpreadPlacer:
        """The multi-host placer (the single-job placer's, which hands it such jobs)."""
        return self._placers().spread

    # what callers and tests read of a pass, kept by its parts
    @property
    def result(self) -> Plan:
        return self.tallies.result

    @property
    def reservation(self) -> Reservation | None:
        return self.tallies.reservation

    @property
    def running_slots(self) -> dict[str, int]:
        return self.tallies.running_slots

    @property
    def group_slots(self) -> dict[str, int]:
        return self.tallies.group_slots

    @property
    def usage_hours(self) -> dict[str, float]:
        return self.tallies.usage_hours

    @property
    def queue_running(self) -> dict[str, int]:
        return self.tallies.queue_running

    @property
    def user_running(self) -> dict[tuple[str, str], int]:
        return self.tallies.user_running

    def _policies(self, plugins: PluginRegistry) -> tuple[dict[str, QueuePolicy], bool, bool, bool]:
        """(each queue's policy, tally, no_reserve, limits). Running tallies feed limits
        and the order plugins other than fcfs; a pass that has neither (plain FCFS, EASY)
        skips them: a cost per running job per pass (and running jobs per queue and user
        are counted only where a queue limits them: `limits`). Without a queue that makes
        reservations (first-fit) a job wider than the free slots is passed over at once
        in the simulator's loop."""
        policies: dict[str, QueuePolicy] = {}
        tally, no_reserve, limits = False, True, False
        for name, queue in self.snapshot.queues.items():
            policy = policies[name] = plugins.policy_for(queue.plugins)
            if queue.max_running is not None or queue.max_running_per_user is not None:
                limits = True
            if policy.reads_usage or limits:
                tally = True
            if policy.reserve is not None:
                no_reserve = False
        return policies, tally, no_reserve, limits

    # --- ordering -----------------------------------------------------------------------

    def _groups(self) -> list[tuple[tuple[int, int, str], Collection[Item]]]:
        """Items by (priority level, order group), each sorted by submission (an array
        before its requeued tasks, tasks by index). A queue that is alone in its group and
        comes already ordered (`Snapshot.queued`) is handed on as it is, not copied."""
        snapshot = self.snapshot
        queued = snapshot.queued
        if queued is not None and len(queued) == 1 and not snapshot.jobs and not snapshot.arrays:
            # one queue with pending jobs, already in order (the simulator, a quiet
            # cluster): its group is the only one; the same for every pass handed the same
            # mapping (the simulator's) with the same queue's same collection (a mapping
            # changed in place is not trusted), until a queue changes (a new memo then)
            memo = self.hosts.memo
            kept = memo.groups if memo is not None else None
            if kept is not None and kept[0] is queued and queued.get(kept[1]) is kept[2]:
                return kept[3]
            ((name, jobs),) = queued.items()
            # named even in submission order (where "" lets queues share a group): `run`
            # then need not read the queue off the group's first job
            only = (
                -snapshot.queues[name].priority,
                0 if self.policies[name].submission_order else 1,
                name,
            )
            alone: list[tuple[tuple[int, int, str], Collection[Item]]] = [(only, jobs)]
            if memo is not None:
                memo.groups = (queued, name, jobs, alone)
            return alone
        memo = self.hosts.memo
        if memo is not None:
            memo.groups = None  # (not kept alive while passes see several queues)
        groups: dict[tuple[int, int, str], list[tuple[int, Item]]] = {}
        keys: dict[str, tuple[int, int, str]] = {}
        for name, queue in self.snapshot.queues.items():
            if self.policies[name].submission_order:
                keys[name] = (-queue.priority, 0, "")
            else:
                keys[name] = (-queue.priority, 1, name)
        shift = 1 << 40
        last: tuple[str, list[tuple[int, Item]]] | None = None
        for job in self.snapshot.jobs:
            name = job.spec.queue
            if last is None or last[0] != name:
                last = (name, groups.setdefault(keys[name], []))
            index = job.index
            last[1].append((job.number * shift + (0 if index is None else index + 1), job))
        for array in self.snapshot.arrays:
            groups.setdefault(keys[array.spec.queue], []).append((array.number * shift, array))
        whole: dict[tuple[int, int, str], list[Collection[PendingJob]]] = {}
        for name, jobs in (self.snapshot.queued or {}).items():
            whole.setdefault(keys[name], []).append(jobs)
        out: list[tuple[tuple[int, int, str], Collection[Item]]] = []
        for key in sorted(groups.keys() | whole.keys()):
            pairs = groups.get(key)
            ready = whole.get(key, [])
            if pairs is None and len(ready) == 1:
                out.append((key, ready[0]))  # already in order: read lazily
                continue
            pairs = pairs or []
            for jobs in ready:
                pairs.extend(
                    (job.number * shift + (0 if job.index is None else job.index + 1), job)
                    for job in jobs
                )
            pairs.sort(key=lambda pair: pair[0])
            out.append((key, [item for _, item in pairs]))
        return out

    def run(self) -> Plan:
        groups = self._groups()
        queues, policies, pool = self.snapshot.queues, self.policies, self.pool
        tallies = self.tallies
        result = tallies.result
        reasons, blocked = result.reasons, tallies.blocked
        satisfied = _SATISFIED
        arrays_done: set[int] = set()
        explain = self.explain
        try_item = self._placers().try_item if explain else None
        for (_, _, queue_name), items in groups:
            queue = queues[queue_name or next(iter(items)).spec.queue]
            policy = policies[queue.name]
            ordered: Iterable[Item]
            if policy.submission_order:
                ordered = items  # items come in submission order: the order's answer
            else:
                ctx = OrderContext(
                    self.now,
                    queue,
                    tallies.usage_hours,
                    self.snapshot.groups,
                    tallies.running_slots,
                    tallies.group_slots,
                    self.snapshot,
                    tallies.predict if policy.predicts else None,
                    tallies.starved if policy.predicts else None,
                )
                ordered = policy.order.order(items, ctx)
            # EASY++'s shortest-first backfill: once the pass holds its reservation, the
            # queue's jobs not yet tried go shortest predicted first (`_shortest_first`);
            # the queue's first job (the oldest starving one, if any) is tried first all
            # the same
            watch = policy.shortest_first and tallies.predict is not None
            if not explain:
                if self._run_quiet(ordered, watch):
                    return result
                continue
            todo, head = _peeked(ordered, watch)
            while todo is not None:
                rest, todo = todo, None
                for item in rest:
                    if watch and tallies.reservation is not None and item is not head:
                        watch = False
                        todo = self._shortest_first(chain((item,), rest))
                        break
                    if pool.total_free_slots <= 0:
                        self._no_room_left(groups, arrays_done)
                        return result
                    spec = item.spec
                    if type(item) is PendingJob:
                        if item.index is None and item.deps is satisfied:
                            # the common case when many jobs wait: a spec already known stuck
                            known = blocked.get(id(spec))
                            if known is not None:
                                reasons[item.job_id] = known
                                continue
                    else:
                        arrays_done.add(item.number)
                    name = spec.queue
                    assert try_item is not None
                    try_item(item, queues[name], policies[name])
        return result

    def _shortest_first(self, items: Iterable[Item]) -> Iterator[Item]:
        """`items` shortest predicted first (EASY++'s SJBF; ties keep their order): once
        the reservation is held, the jobs that fit the holes best, and that wait the least
        relative to their length, go first. A pass sorts up to every waiting job of the
        queue, so the work per job is done by `map` and `sorted`, and a length is asked
        once per group of jobs alike (`per_alike`)."""
        predict = self.tallies.predict
        assert predict is not None

        def length(spec: JobSpec) -> float:
            expected = predict(spec)
            return INFINITE if expected is None else expected  # (no prediction nor limit)

        rest = list(items)
        specs = list(map(_SPEC, rest))
        ids = list(map(id, specs))
        lengths = per_alike(dict(zip(ids, specs, strict=True)), length)
        ranks = list(map(lengths.__getitem__, ids))
        return map(rest.__getitem__, sorted(range(len(rest)), key=ranks.__getitem__))

    def _run_quiet(self, ordered: Iterable[Item], watch: bool = False) -> bool:
        """The simulator's loop (`explain=False`): the same placements as the loop in
        `run`, without naming why the rest waits; True when the pass is over (no free slot
        left, or a strict order blocked).

        A minimal simulator compares two numbers per waiting job, so this loop does too
        for the jobs that surely cannot start: a job wider than the free slots is passed
        over with no call at all when trying it could make no reservation (one is held
        already, or no queue makes any)."""
        queues, policies, pool = self.snapshot.queues, self.policies, self.pool
        tallies, placer = self.tallies, self.placer  # (the placer made when first needed)
        reasons, blocked = tallies.result.reasons, tallies.blocked
        satisfied = _SATISFIED
        no_reserve = self._no_reserve
        skip_wide = no_reserve or tallies.reservation is not None
        # the quick route for plain jobs (below): no advance reservation to judge, no
        # running jobs to count (`tally`: no queue has limits or orders by usage)
        quick_route = self.hosts.gate is None and not tallies.tally
        hosts = self.hosts
        sets, placements, views = hosts.sets, tallies.result.placements, pool.hosts
        predict = tallies.predict
        todo, head = _peeked(ordered, watch)
        while todo is not None:
            rest, todo = todo, None
            for item in rest:
                if watch and tallies.reservation is not None and item is not head:
                    watch = False  # the rest shortest first, as `run` does
                    todo = self._shortest_first(chain((item,), rest))
                    break
                free = pool.total_free_slots
                if free <= 0:
                    return True
                spec = item.spec
                if skip_wide and spec.slots > free:
                    continue  # as _cannot_start would say, from one comparison
                # (`blocked` is empty until a try fails: most tries ask nothing of it)
                if (
                    blocked
                    and type(item) is PendingJob
                    and item.index is None
                    and item.deps is satisfied
                ):
                    known = blocked.get(id(spec))
                    if known is not None:
                        reasons[item.job_id] = known
                        continue
                name = spec.queue
                policy = policies[name]
                res = tallies.reservation
                if res is None:  # `_cannot_start` without a reservation, without the call
                    if policy.reserve is None and spec.slots > free:
                        continue
                elif self._cannot_start(spec, policy):
                    continue
                if type(item) is PendingJob:  # `try_item`, without its tests for an array
                    queue = queues[name]
                    if (
                        # the gates `held` tests, most often all open: asked only when one
                        # may be shut
                        not (
                            queue.active
                            and item.deps is satisfied
                            and spec.begin_time is None
                            and not spec.reservation
                        )
                        and (placer or self._placers()).held(item, spec, queue, item.job_id, True)
                    ):
                        continue
                    if (
                        res is None
                        and quick_route
                        and item.index is None
                        and not (spec.gres or spec.licenses or spec.exclusive or spec.resources)
                    ):
                        # A plain job (one host, no devices, licenses or -R; not an array
                        # task) while nothing is reserved: `try_job`, `place` and `commit`
                        # reduce to a host from the shape's candidates, taken (one call, not
                        # five: the most common try of a replay). What they would do otherwise
                        # (a reason, a reservation, a ranking on free resources) they still do.
                        shape = (name, spec.slots, spec.memory_mb, spec.resources, None, spec.gres)
                        found = sets.get(shape)
                        if found is None:
                            found = sets[shape] = hosts.candidates(spec, queue, policy)
                        if type(found) is OrderedCandidates:
                            i = found.find()  # at None it stays at None: `place` asks again
                            if i is not None:
                                pool.take(
                                    i,
                                    spec.slots,
                                    spec.memory_mb,
                                    spec.walltime_s,
                                    predict(spec) if predict is not None else None,
                                )
                                placements.append(Placement(item.job_id, views[i].name, ()))
                                continue
                    if placer is None:
                        placer = self._placers()
                    placer.try_job(item, spec, queue, policy, item.job_id)
                else:
                    if placer is None:
                        placer = self._placers()
                    placer.try_item(item, queues[name], policy)
                res = tallies.reservation
                if res is not None:
                    if res.host < 0:
                        return True  # strict order: nothing behind a blocked job starts
                    skip_wide = True
        return False

    def _cannot_start(self, spec: JobSpec, policy: QueuePolicy) -> bool:
        """Whether `spec` surely cannot start now and trying would change nothing (it
        would make no reservation), from counts alone: the simulator's shortcut past the
        long tail of a queue, where a minimal simulator compares two numbers per job."""
        pool, res = self.pool, self.tallies.reservation
        slots = spec.slots
        if res is None:
            return policy.reserve is None and slots > pool.total_free_slots
        if slots > pool.total_free_slots:
            return True
        wall = self.tallies.judged(spec) if self.tallies.by_prediction else spec.walltime_s
        if wall is not None and self.now + wall <= res.start:
            return False  # ends before the reserved start: may use the reserved host
        if slots <= res.extra_slots and spec.memory_mb <= res.extra_mem:
            return False  # fits in what the reserved host has left over then
        if type(res) is multihost.HostSetReservation:
            return False  # several reserved hosts may each have some left over: try it
        # only the other hosts remain: together they must have the slots
        return slots > pool.total_free_slots - max(0, pool.free_slots[res.host])

    def _no_room_left(
        self, groups: list[tuple[tuple[int, int, str], Collection[Item]]], arrays_done: set[int]
    ) -> None:
        """Every host is full: name why each job not yet tried waits, without searching
        (jobs sharing a spec share the answer)."""
        result = self.tallies.result
        reasons = result.reasons
        placed = {p.job_id for p in result.placements}
        hosts, spread = self.hosts, self._placers().spread
        by_spec: dict[int, WaitReason] = {}
        for _, items in groups:
            for item in items:
                if type(item) is PendingJob:
                    key = item.job_id
                    if key in reasons or key in placed:
                        continue  # tried already
                elif item.number in arrays_done:
                    continue
                else:
                    key = str(item.number)
                if item.deps is not _SATISFIED:
                    reasons[key] = (
                        why.DEPENDENCY if item.deps is DepStatus.WAITING else why.DEPENDENCY_NEVER
                    )
                    continue
                spec = item.spec
                if spec.begin_time is not None and spec.begin_time > self.now:
                    reasons[key] = why.begin(spec.begin_time)
                    continue
                reason = by_spec.get(id(spec))
                if reason is None:
                    queue = self.snapshot.queues[spec.queue]
                    if not queue.active:
                        reason = why.queue_inactive(queue.name)
                    else:
                        shape = hosts.shape(queue, spec)
                        known = hosts.sets.get(shape)
                        if known is None:
                            known = hosts.sets[shape] = hosts.candidates(
                                spec, queue, self.policies[queue.name]
                            )
                        reason = known if isinstance(known, WaitReason) else why.ROOM
                        if reason is why.TOO_BIG and spread.may_spread(
                            spec, queue, self.policies[queue.name]
                        ):
                            reason = spread.wait_reason(spec, queue)
                    by_spec[id(spec)] = reason
                reasons[key] = reason
