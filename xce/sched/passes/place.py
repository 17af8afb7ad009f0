"""The scheduling pass's single-job placer: trying one job or array of a queue.

Its queue's gates (active, limits, dependencies, begin time, reservation target), a
host now or the reason it waits (and maybe the EASY reservation), and the commit of a
placement. A part that `SchedulingPass` (xce/sched/passes/pipeline.py) holds; multi-host
jobs it hands to the spread placer (xce/sched/passes/spread.py).
"""

from __future__ import annotations

from xce.core import gres
from xce.core.allocation import host_memory_mb
from xce.core.deps import DepStatus
from xce.core.model import HostSlots, JobSpec, QueueRecord, task_id
from xce.sched import reasons as why
from xce.sched.expr import parse_requirement
from xce.sched.passes import multihost
from xce.sched.passes.advance import effective_walltime
from xce.sched.passes.gres import waiting_reason, with_devices
from xce.sched.passes.hosts import HostSearch
from xce.sched.passes.reservation import Reservation
from xce.sched.passes.spread import SpreadPlacer
from xce.sched.passes.tallies import PassTallies
from xce.sched.plugins import QueuePolicy
from xce.sched.plugins.base import Item, ReservePlugin
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import PendingArray, PendingJob
from xce.sched.types import Placement

_SATISFIED = DepStatus.SATISFIED


class JobPlacer:
    """Trying and placing one item of a queue: a part of `SchedulingPass`, handed the
    pass's host search, its multi-host placer and its shared record (`PassTallies`)."""

    __slots__ = (
        "blocked",
        "gate",
        "hosts",
        "now",
        "placements",
        "pool",
        "reasons",
        "sets",
        "spread",
        "tallies",
        "tally",
    )

    def __init__(self, hosts: HostSearch, spread: SpreadPlacer, tallies: PassTallies) -> None:
        self.hosts = hosts
        self.spread = spread
        self.tallies = tallies
        # what the pass never rebinds, held here as well: one look, not two, per use
        self.pool, self.gate, self.sets = hosts.pool, hosts.gate, hosts.sets
        self.now, self.tally, self.blocked = tallies.now, tallies.tally, tallies.blocked
        self.reasons, self.placements = tallies.result.reasons, tallies.result.placements

    def try_item(self, item: Item, queue: QueueRecord, policy: QueuePolicy) -> None:
        spec = item.spec
        is_job = type(item) is PendingJob
        key = item.job_id if isinstance(item, PendingJob) else str(item.number)
        if self.held(item, spec, queue, key, is_job):
            return
        if isinstance(item, PendingJob):
            self.try_job(item, spec, queue, policy, key)
        else:
            self.try_array(item, spec, queue, policy, key)

    def held(self, item: Item, spec: JobSpec, queue: QueueRecord, key: str, is_job: bool) -> bool:
        """Whether a gate before any host search holds `item` back (inactive queue, an
        array's limits, dependencies, begin time, reservation target): its reason is then
        recorded, and for a job shared with the jobs of the same spec where it lasts."""
        reasons = self.reasons
        if not queue.active:
            reasons[key] = why.queue_inactive(queue.name)
            if is_job:
                self.blocked[id(spec)] = reasons[key]
            return True
        if not is_job:
            limited = self.tallies.limit(queue, spec.user)
            if limited:
                reasons[key] = limited
                return True
        if item.deps is not _SATISFIED:
            reasons[key] = (
                why.DEPENDENCY if item.deps is DepStatus.WAITING else why.DEPENDENCY_NEVER
            )
            return True
        if spec.begin_time is not None and spec.begin_time > self.now:
            reasons[key] = why.begin(spec.begin_time)
            return True
        if spec.reservation:
            problem = (
                why.no_reservation(spec.reservation)
                if self.gate is None
                else self.gate.target_problem(spec)
            )
            if problem is not None:
                reasons[key] = problem
                if is_job:
                    self.blocked[id(spec)] = problem
                return True
        return False

    def try_job(
        self, item: PendingJob, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, key: str
    ) -> None:
        """One job (or one requeued array task) past the gates: limits, licenses, a host."""
        reasons = self.reasons
        if item.index is not None:
            left = self.tallies.room(item.number)
            if left is not None and left <= 0:
                reasons[key] = why.ARRAY_LIMIT
                return
        blocked = self.blocked.get(id(spec))
        if blocked is not None:  # free resources and limits only shrink in a pass
            reasons[key] = blocked
            return
        if queue.max_running is not None or queue.max_running_per_user is not None:
            limited = self.tallies.limit(queue, spec.user)
            if limited:
                reasons[key] = self.blocked[id(spec)] = limited
                return
        if spec.licenses:  # free licenses only shrink in a pass, like limits
            short = self.hosts.devices.short_license(spec)
            if short:
                reasons[key] = self.blocked[id(spec)] = short
                return
        host = self.place(key, spec, queue, policy)
        if host is None:
            # the job's shape waits as it does, without the reservation it may hold
            self.blocked[id(spec)] = reasons[key].without_reservation()
        else:
            array = item.number if item.index is not None else None
            self.commit(key, spec, host, array)

    def try_array(
        self, item: PendingArray, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, key: str
    ) -> None:
        """An array's pending tasks, in order, while its limit, the queue's and the
        licenses allow and a host is found."""
        reasons = self.reasons
        left = self.tallies.room(item.number)
        if left is not None and left <= 0:
            reasons[key] = why.ARRAY_LIMIT
            return
        for index in item.pending:
            if left is not None and left <= 0:
                break
            limited = self.tallies.limit(queue, spec.user)
            if limited:
                reasons[key] = limited
                break
            short = self.hosts.devices.short_license(spec) if spec.licenses else None
            if short:
                reasons[key] = short
                break
            host = self.place(key, spec, queue, policy)
            if host is None:
                break
            self.commit(task_id(item.number, index), spec, host, item.number)
            if left is not None:
                left -= 1

    def commit(
        self, job_id: str, spec: JobSpec, i: int | multihost.Shares, array: int | None
    ) -> None:
        if type(i) is list:
            self.commit_shares(job_id, spec, i, array)
            return
        assert isinstance(i, int)
        pool, tallies = self.pool, self.tallies
        if tallies.predict is None:
            pool.take(i, spec.slots, spec.memory_mb, spec.walltime_s)
        else:
            pool.take(i, spec.slots, spec.memory_mb, spec.walltime_s, tallies.expected(spec))
        res = tallies.reservation
        if res is not None:
            res.took(i, spec.slots, spec.memory_mb, tallies.judged(spec), self.now)
        devices: tuple[str, ...] = ()
        if spec.gres:
            devices = self.hosts.devices.take(i, gres.counts_of(spec.gres))
        if spec.licenses:
            self.hosts.devices.take_licenses(spec)
        self.placements.append(Placement(job_id, pool.hosts[i].name, devices))
        if self.tally:
            self.tallies.count(spec.user, spec.queue, spec.slots)
        if array is not None:
            self.tallies.placed_task(array)

    def commit_shares(
        self, job_id: str, spec: JobSpec, shares: multihost.Shares, array: int | None
    ) -> None:
        """A multi-host placement: every share taken at once (all or nothing)."""
        pool, tallies = self.pool, self.tallies
        res, wall = tallies.reservation, spec.walltime_s
        expected, judged = tallies.expected(spec), tallies.judged(spec)
        for i, slots in shares:
            mem = host_memory_mb(spec, slots)
            pool.take(i, slots, mem, wall, expected)
            if res is not None:
                res.took(i, slots, mem, judged, self.now)
        if spec.licenses:
            self.hosts.devices.take_licenses(spec)
        asked = gres.counts_of(spec.gres)  # `--gpus N` is N on every host of the job
        take = self.hosts.devices.take if asked else None
        hosts = tuple(
            HostSlots(pool.hosts[i].name, slots, take(i, asked) if take is not None else ())
            for i, slots in shares
        )
        self.placements.append(Placement(job_id, hosts[0].host, hosts[0].devices, hosts=hosts))
        self.tallies.count(spec.user, spec.queue, spec.slots)
        if array is not None:
            self.tallies.placed_task(array)

    def place(
        self, key: str, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy
    ) -> int | multihost.Shares | None:
        """A host for `spec` now (several for a multi-host job), or None with the reason
        recorded (and maybe a reservation)."""
        if spec.exclusive or spec.resources:
            req = parse_requirement(spec.resources) if spec.resources else None
            if multihost.spreads(spec, req):
                return self.spread.place(key, spec, queue, policy, req)
        shape = self.hosts.shape(queue, spec)
        found = self.sets.get(shape)
        if found is None:
            found = self.sets[shape] = self.hosts.candidates(spec, queue, policy)
        if isinstance(found, WaitReason):
            if found is why.TOO_BIG and self.spread.may_spread(spec, queue, policy):
                return self.spread.place(
                    key,
                    spec,
                    queue,
                    policy,
                    None if not spec.resources else parse_requirement(spec.resources),
                )
            self.reasons[key] = found
            return None
        res, now, gate = self.tallies.reservation, self.now, self.gate
        slots, mem = spec.slots, spec.memory_mb
        wall = self.tallies.judged(spec) if res is not None else spec.walltime_s
        allow = None if res is None else (lambda i: res.allows(i, slots, mem, wall, now))
        if spec.gres:  # a host without the devices now lacks them for the rest of the pass
            allow = self.hosts.with_devices(spec, allow)
        if gate is not None:
            gate.refused = None
            judged = effective_walltime(spec, queue)
            easy = allow
            allow = (
                (lambda i: gate.allows(i, spec, judged))
                if easy is None
                else (lambda i: easy(i) and gate.allows(i, spec, judged))
            )
        host = found.find(allow)
        if host is not None:
            return host
        refused = gate.describe() if gate is not None and gate.refused is not None else None
        # A job kept off a host by a reservation waits for that (its shape too); the EASY
        # reservation below is then made outside the reservations' windows.
        reason = self.sets[shape] = refused or why.ROOM
        if refused is None and spec.gres and self.hosts.devices_short(spec, queue):
            reason = self.sets[shape] = waiting_reason(spec)
        if res is None and policy.reserve is not None and not spec.reservation:
            made = self.reserve_host(key, spec, queue, policy.reserve)
            if made is not None and refused is None:
                reason = reason.holding(made.describe())
        self.reasons[key] = reason
        return None

    def reserve_host(
        self, key: str, spec: JobSpec, queue: QueueRecord, reserve: ReservePlugin
    ) -> Reservation | None:
        """The pass's one reservation (EASY), made for `key` when no host has room now;
        outside the advance reservations' windows when the cluster has any. Timed by
        predictions when the plugin predicts, unless `key` is starving (`by_prediction`)."""
        gate, now = self.gate, self.now
        hosts = self.hosts.filter(spec, queue, self.hosts.policies[queue.name])
        if spec.gres:  # only hosts that have the devices at all (their release times
            # are judged by slots and memory: the reservation is a lower bound)
            hosts = with_devices(self.pool.hosts, hosts, spec)
        predicted = self.pool.expecting = self.tallies.reserving(
            key, self.hosts.policies[queue.name]
        )
        try:
            made = (
                reserve.reserve(self.pool, hosts, spec, now)
                if gate is None
                else gate.reserve(reserve, hosts, spec, effective_walltime(spec, queue))
            )
        finally:
            self.pool.expecting = False
        if made is not None:
            made.job_id = key
            self.tallies.reservation = made
            self.tallies.by_prediction = predicted
            self.tallies.result.reservations.append(made.to_plain())
        return made
