"""The scheduling pass's host search: which hosts may take a job's shape, ranked.

Filters (cached per queue and `-R`), candidate sets per shape (xce/sched/passes/hostpool.py) and
device checks. A part that `SchedulingPass` (xce/sched/passes/pipeline.py) holds, and that
its placers (xce/sched/passes/spread.py, place.py) are handed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from xce.core import gres
from xce.core.model import JobSpec, QueueRecord
from xce.sched import reasons as why
from xce.sched.expr import (
    parse_requirement,
)
from xce.sched.passes.advance import AdvanceGate
from xce.sched.passes.gres import DevicePool, too_few
from xce.sched.passes.hostpool import CandidateSet, HostPool, OrderedCandidates, RankedCandidates
from xce.sched.passes.memo import PassMemo
from xce.sched.passes.ranking import FREE_ATTRIBUTES, key_function, select_names
from xce.sched.passes.tallies import PassTallies
from xce.sched.plugins import QueuePolicy
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import Snapshot

SHAPES_KEPT = 4096  # job shapes a pass memo keeps (`candidates`), then it starts over


class HostFindings:
    """What a pass derives of the hosts as it first needs it, kept for the rest of the
    pass: made on first need (`HostSearch.found`), so a pass whose shapes the memo
    answers (most passes of a replay, xce/sched/passes/memo.py) makes and frees none of it."""

    __slots__ = ("filtered", "key_functions", "rankings", "spread_hosts", "spreadable")

    def __init__(self) -> None:
        # (queue, -R) -> the hosts the queue's filters accept (`filter`)
        self.filtered: dict[tuple[str, str], list[int]] = {}
        self.spread_hosts: dict[tuple, list[int]] = {}  # multi-host shape -> its hosts
        self.spreadable: dict[tuple[str, str, int], bool] = {}
        # (queue, -R) -> hosts ranked once (static) or a heap to copy (dynamic)
        self.rankings: dict[tuple[str, str], tuple[Any, int]] = {}
        self.key_functions: dict[tuple[str, str], tuple[Callable[[int], tuple], bool, bool]] = {}


class HostSearch:
    """Finding hosts for one shape of job within a pass: the queues' filters, the
    candidate sets per shape (`sets`) and the free devices. A part of `SchedulingPass`
    (xce/sched/passes/pipeline.py), which makes one per pass."""

    # Slotted: a pass is made per event the controller applies and per instant `xce
    # simulate` replays, and building and freeing its attributes in a dict was a
    # part of each
    __slots__ = (
        "_devices",
        "_findings",
        "gate",
        "memo",
        "policies",
        "pool",
        "sets",
        "snapshot",
        "tallies",
    )

    def __init__(
        self,
        snapshot: Snapshot,
        pool: HostPool,
        policies: dict[str, QueuePolicy],
        memo: PassMemo | None,
        gate: AdvanceGate | None,
        tallies: PassTallies,
    ) -> None:
        """`memo`: what earlier passes found and later ones may reuse (None when the
        snapshot carries none); `gate`: the advance reservations (None without any);
        `tallies`: the pass's shared record (its `reservation` keys the shapes)."""
        self.snapshot = snapshot
        self.pool = pool
        self.policies = policies
        self.memo = memo
        self.gate = gate
        self.tallies = tallies
        # shape (`shape`) -> the hosts that may take it in this pass, or why none can
        self.sets: dict[tuple, CandidateSet | WaitReason] = {}
        self._findings: HostFindings | None = None  # (`found`), made when first asked
        self._devices: DevicePool | None = None  # (`devices`), made when first asked

    def found(self) -> HostFindings:
        """What this pass found of the hosts so far, made when first needed."""
        found = self._findings
        if found is None:
            found = self._findings = HostFindings()
        return found

    @property
    def devices(self) -> DevicePool:
        """Free devices and licenses for this pass, made when first asked: a pass whose
        jobs ask for none (most, and every pass of most replays) never makes it."""
        pool = self._devices
        if pool is None:
            snapshot = self.snapshot
            pool = self._devices = DevicePool(snapshot.hosts, snapshot.licenses)
        return pool

    def shape(self, queue: QueueRecord, spec: JobSpec) -> tuple:
        """The key of the candidate sets of `spec`'s shape (`sets`); the quiet loop's
        quick route (pipeline.py `_run_quiet`) builds the last form inline: keep alike."""
        if self.gate is not None:  # the gate's verdict depends on walltime and target
            return (
                queue.name,
                spec.slots,
                spec.memory_mb,
                spec.resources,
                spec.walltime_s,
                spec.reservation,
                spec.gres,
                self.tallies.judged(spec) if self.tallies.by_prediction else None,
            )
        wall = self.tallies.judged(spec) if self.tallies.reservation is not None else None
        return (queue.name, spec.slots, spec.memory_mb, spec.resources, wall, spec.gres)

    def with_devices(
        self, spec: JobSpec, allow: Callable[[int], bool] | None
    ) -> Callable[[int], bool]:
        asked, has = gres.counts_of(spec.gres), self.devices.has
        if allow is None:
            return lambda i: has(i, asked)
        return lambda i: has(i, asked) and allow(i)

    def devices_short(self, spec: JobSpec, queue: QueueRecord) -> bool:
        """Whether some candidate host has the slots and memory now but not the devices."""
        pool = self.pool
        return any(
            pool.free_slots[i] >= spec.slots and pool.free_mem[i] >= spec.memory_mb
            for i in self.filter(spec, queue, self.policies[queue.name])
        )

    def filter(self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy) -> list[int]:
        """The hosts the queue's filters accept for `spec` (cached per queue and -R; kept
        in the memo for later passes when every filter that applied is `fixed`). Shared:
        never modified."""
        fkey = (queue.name, spec.resources)
        filtered = self.found().filtered
        hosts = filtered.get(fkey)
        if hosts is None:
            memo = self.memo
            if memo is not None:
                hosts = memo.filtered.get(fkey)
            if hosts is None:
                views = self.pool.hosts
                hosts = list(range(len(views)))
                keep = memo is not None
                for accepts, refuses_any, fixed in policy.filter_tests:
                    if refuses_any is None or refuses_any(spec, queue):
                        hosts = [i for i in hosts if accepts(views[i], spec, queue)]
                        keep = keep and fixed
                if keep and memo is not None:
                    memo.filtered[fkey] = hosts
            filtered[fkey] = hosts
        return hosts

    def candidates(
        self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy
    ) -> CandidateSet | WaitReason:
        """The hosts that may take `spec`'s shape in this pass, best first, or why none
        ever can. What is found from the hosts' fixed parts alone (a refusal, or a static
        ranking) is kept in the memo for the next passes: a shape is asked once a pass,
        and a short pass asks mostly shapes an earlier one asked."""
        memo = self.memo
        if memo is None:
            return self.find_candidates(spec, queue, policy)
        slots, mem = spec.slots, spec.memory_mb
        mkey = (queue.name, spec.resources, slots, mem, spec.gres)
        known = memo.shapes.get(mkey)
        if known is not None:
            if type(known) is tuple:
                return OrderedCandidates(self.pool, known[0], slots, mem, known[1])
            assert isinstance(known, WaitReason)
            return known
        found = self.find_candidates(spec, queue, policy)
        fkey = (queue.name, spec.resources)
        hosts = self.found().filtered.get(fkey)
        if hosts is not None and memo.filtered.get(fkey) is hosts:  # fixed filters only
            if len(memo.shapes) >= SHAPES_KEPT:  # a long-lived controller's many shapes
                memo.shapes.clear()
            if isinstance(found, WaitReason):  # no host, too big, too few devices at all
                memo.shapes[mkey] = found
            elif type(found) is OrderedCandidates:
                ranked = memo.ranked.get(fkey)
                if ranked is not None:  # the static ranking `found` walks
                    memo.shapes[mkey] = (ranked, found.live_select)
        return found

    def find_candidates(
        self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy
    ) -> CandidateSet | WaitReason:
        pool = self.pool
        fkey = (queue.name, spec.resources)
        found = self.found()
        hosts = found.filtered.get(fkey)
        if hosts is None:
            hosts = self.filter(spec, queue, policy)
        if not hosts:
            return why.NO_MATCH if spec.resources else why.NO_HOST
        slots, mem = spec.slots, spec.memory_mb
        views = pool.hosts
        big = [i for i in hosts if views[i].slots >= slots and views[i].memory_mb >= mem]
        if not big:
            return why.TOO_BIG
        if spec.gres:
            lacking = too_few(views, big, spec)
            if lacking:
                return lacking
        req = parse_requirement(spec.resources) if spec.resources else None
        live = None
        if req is not None and select_names(req.select) & FREE_ATTRIBUTES:
            live = req.select
        memo = self.memo
        if memo is not None:
            kept = memo.ranked.get(fkey)
            if kept is not None:  # a static ranking of hosts the memo keeps
                return OrderedCandidates(pool, kept, slots, mem, live)
        cached = found.rankings.get(fkey)
        functions = found.key_functions.get(fkey)
        if functions is None:
            functions = found.key_functions[fkey] = key_function(pool, req, policy.score)
        key, dynamic, improving = functions
        if not dynamic:
            if cached is None:
                ranked = (
                    sorted(hosts, key=key)
                    if (req is not None and req.order) or policy.ranks
                    else hosts
                )
                # kept for jobs without -R (the built-in `select` filter is not fixed, so
                # with one the hosts are not kept); an `order[]` on fixed attributes would
                # last as long as `hosts` too; a score plugin's own ranking may read anything
                if memo is not None and not policy.ranks and memo.filtered.get(fkey) is hosts:
                    memo.ranked[fkey] = ranked
                cached = found.rankings[fkey] = (ranked, 0)
            return OrderedCandidates(pool, cached[0], slots, mem, live)
        # A heap is a heap when copied; entries made stale since only ever got worse
        # unless the ranking is `improving`, which must see every change: rebuild then.
        if cached is None or (improving and cached[1] != pool.placements):
            versions = pool.versions()
            heap = [(key(i), i, versions[i]) for i in hosts]
            heapq.heapify(heap)
            cached = found.rankings[fkey] = (heap, pool.placements)
        return RankedCandidates(pool, cached[0], slots, mem, key, improving, live)
