"""The scheduling pass's multi-host placer.

Whether a job spreads over several hosts, the shares it gets (xce/sched/passes/multihost.py),
why it waits and the host-set reservation it may hold. A part that `SchedulingPass`
(xce/sched/passes/pipeline.py) holds, and that its single-job placer (place.py) is handed.
"""

from __future__ import annotations

from typing import Any

from xce.core import gres
from xce.core.model import JobSpec, QueueRecord
from xce.sched import reasons as why
from xce.sched.expr import (
    parse_requirement,
)
from xce.sched.passes import multihost
from xce.sched.passes.advance import effective_walltime
from xce.sched.passes.gres import with_devices
from xce.sched.passes.hosts import HostSearch
from xce.sched.passes.ranking import key_function
from xce.sched.passes.reservation import Reservation
from xce.sched.passes.tallies import PassTallies
from xce.sched.plugins import QueuePolicy
from xce.sched.reasons import WaitReason


class SpreadPlacer:
    """Placing a job on several hosts: a part of `SchedulingPass`, handed the pass's host
    search and its shared record (`PassTallies`)."""

    # (two references only: a pass makes one whether or not a job spreads, and what
    # else it reads, the pool, the candidate sets, the plan, it reads through these)
    __slots__ = ("hosts", "tallies")

    def __init__(self, hosts: HostSearch, tallies: PassTallies) -> None:
        self.hosts = hosts
        self.tallies = tallies

    def place(
        self, key: str, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, req: Any
    ) -> multihost.Shares | None:
        """Shares on several hosts now (xce/sched/passes/multihost.py), or None with the reason
        recorded and, for the first such job under EASY, a reservation of a host set."""
        search, reasons = self.hosts, self.tallies.result.reasons
        sets = search.sets
        shape = ("spread", *search.shape(queue, spec))
        known = sets.get(shape)
        if isinstance(known, WaitReason):
            reasons[key] = known
            return None
        hosts = search.filter(spec, queue, policy)
        if spec.gres:  # devices per host: only hosts that have them at all may take a share
            hosts = with_devices(search.pool.hosts, hosts, spec)
        if not hosts:
            reasons[key] = sets[shape] = why.NO_MATCH if spec.resources else why.NO_HOST
            return None
        res = self.tallies.reservation
        ordered = self.order(shape, hosts, queue, policy, spec, req)
        layout = multihost.Layout.of(spec, req)
        shares = self.choose_shares(spec, queue, req, layout, ordered)
        if shares is not None:
            return shares
        reason = sets[shape] = self.wait_reason(spec, queue)
        # (a job with devices reserves no host set: the reservation does not count devices)
        if (
            reason is why.ROOM
            and res is None
            and policy.reserve is not None
            and not spec.reservation
            and not spec.gres
        ):
            made = self.reserve(key, spec, queue, policy, req, layout, hosts)
            if made is not None:
                reason = why.ROOM.holding(made.describe())
        reasons[key] = reason
        return None

    def order(
        self,
        shape: tuple,
        hosts: list[int],
        queue: QueueRecord,
        policy: QueuePolicy,
        spec: JobSpec,
        req: Any,
    ) -> list[int]:
        """The hosts of this shape, ranked when the shape is first tried in the pass (a
        ranking on free resources is not re-sorted per job: one sort per shape and pass)
        and pruned of hosts too full for any share (multihost.choose)."""
        pool, found = self.hosts.pool, self.hosts.found()
        ordered = found.spread_hosts.get(shape)
        if ordered is None:
            fkey = (queue.name, spec.resources)
            functions = found.key_functions.get(fkey)
            if functions is None:
                functions = found.key_functions[fkey] = key_function(pool, req, policy.score)
            rank = functions[0]
            ordered = (
                sorted(hosts, key=rank)
                if (req is not None and req.order) or policy.ranks
                else list(hosts)
            )
            found.spread_hosts[shape] = ordered
        return ordered

    def choose_shares(
        self,
        spec: JobSpec,
        queue: QueueRecord,
        req: Any,
        layout: multihost.Layout,
        ordered: list[int],
    ) -> multihost.Shares | None:
        """Shares that fit now on one group of `ordered` (first group that has them), on
        hosts that have the devices, pass `-R`'s live test, and leave the EASY reservation
        and the advance reservations their due."""
        pool, now, res = self.hosts.pool, self.tallies.now, self.tallies.reservation
        groups = multihost.groups_of(pool, ordered, req)
        live = multihost.live_ok(pool, req)
        wall = self.tallies.judged(spec) if res is not None else spec.walltime_s
        views = pool.hosts
        gate = self.hosts.gate
        judged = effective_walltime(spec, queue) if gate is not None else None
        asked = gres.counts_of(spec.gres)
        has = self.hosts.devices.has

        def ok(i: int, slots: int, mem: int) -> bool:
            return (
                (not asked or has(i, asked))
                and (live is None or live(i))
                and (res is None or res.allows(i, slots, mem, wall, now))
                and (gate is None or gate.allows(i, spec, judged))
            )

        def host_slots(i: int) -> int:
            return views[i].slots

        for group in groups:
            shares = multihost.choose(
                layout,
                spec,
                group,
                pool.free_slots,
                pool.free_mem,
                host_slots,
                ok,
                prune=group is ordered,
            )
            if shares is not None:
                return shares
        return None

    def reserve(
        self,
        key: str,
        spec: JobSpec,
        queue: QueueRecord,
        policy: QueuePolicy,
        req: Any,
        layout: multihost.Layout,
        hosts: list[int],
    ) -> Reservation | None:
        """The pass's one reservation for a multi-host job that waits for room: a host set
        where the policy makes those, else the policy's own (one host)."""
        pool = self.hosts.pool
        assert policy.reserve is not None
        predicted = pool.expecting = self.tallies.reserving(key, policy)
        try:
            made = self._reserve(spec, queue, policy, req, layout, hosts)
        finally:
            pool.expecting = False
        if made is not None:
            made.job_id = key
            self.tallies.reservation = made
            self.tallies.by_prediction = predicted
            self.tallies.result.reservations.append(made.to_plain())
        return made

    def _reserve(
        self,
        spec: JobSpec,
        queue: QueueRecord,
        policy: QueuePolicy,
        req: Any,
        layout: multihost.Layout,
        hosts: list[int],
    ) -> Reservation | None:
        """`reserve`'s reservation, not yet recorded."""
        pool, now = self.hosts.pool, self.tallies.now
        assert policy.reserve is not None
        if policy.host_sets:
            # every host the shape may use, ranked afresh (the list above was pruned of
            # the full ones, which are the ones that free later): once per pass
            rank = self.hosts.found().key_functions[queue.name, spec.resources][0]
            ranked = (
                sorted(hosts, key=rank)
                if (req is not None and req.order) or policy.ranks
                else list(hosts)
            )
            made: Reservation | None = multihost.reserve(
                pool, layout, spec, multihost.groups_of(pool, ranked, req), now
            )
        else:
            made = policy.reserve.reserve(pool, hosts, spec, now)
        return made

    def may_spread(self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy) -> bool:
        """A job with no span that no host can hold spreads when it is the slots that no
        host has (not the memory: `--mem` is per host, spreading would not lower it)."""
        if spec.resources and not multihost.span_allows_spreading(
            parse_requirement(spec.resources)
        ):
            return False
        key = (queue.name, spec.resources, spec.slots)
        spreadable = self.hosts.found().spreadable
        known = spreadable.get(key)
        if known is None:
            views = self.hosts.pool.hosts
            known = spreadable[key] = all(
                views[i].slots < spec.slots for i in self.hosts.filter(spec, queue, policy)
            )
        return known

    def wait_reason(self, spec: JobSpec, queue: QueueRecord) -> WaitReason:
        """Why a job that may spread waits: for slots, or for ever (its hosts together
        have fewer slots than it asks)."""
        hosts = self.hosts.filter(spec, queue, self.hosts.policies[queue.name])
        views = self.hosts.pool.hosts
        sizes = [views[i].slots for i in hosts]
        if sum(sizes) < spec.slots:
            return why.TOO_FEW
        span = parse_requirement(spec.resources).span if spec.resources else None
        if span is not None and span.ptile is not None and not spec.exclusive and sizes:
            # enough slots in all, yet tiles of that size may fit no set of these hosts
            short = multihost.ptile_shortfall(span.ptile, spec.slots, sizes)
            if short:
                return why.too_few_tiles(short)
        return why.ROOM
