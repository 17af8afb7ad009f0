"""The scheduling pass, third layer: trying one job or array of a queue.

Its queue's gates (active, limits, dependencies, begin time, reservation target), a
host now or the reason it waits (and maybe the EASY reservation), and the commit of a
placement. A layer of `SchedulingPass` (xce/sched/passes/pipeline.py), split from it.
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
from xce.sched.passes.reservation import Reservation
from xce.sched.passes.spread import SpreadPlacement
from xce.sched.plugins import QueuePolicy
from xce.sched.plugins.base import Item, ReservePlugin
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import PendingArray, PendingJob
from xce.sched.types import Placement

_SATISFIED = DepStatus.SATISFIED


class JobPlacement(SpreadPlacement):
    """Trying and placing one item of a queue (a base of SchedulingPass)."""

    __slots__ = ()

    def _count(self, user: str, queue: str, slots: int, jobs: int = 1) -> None:
        if not self._tally:
            return
        running = self.running_slots
        running[user] = running.get(user, 0) + slots
        group = self.snapshot.groups.get(user, "default") if self.snapshot.groups else "default"
        self.group_slots[group] = self.group_slots.get(group, 0) + slots
        if self._limits:
            self.queue_running[queue] = self.queue_running.get(queue, 0) + jobs
            self.user_running[queue, user] = self.user_running.get((queue, user), 0) + jobs

    def _count_running(self) -> None:
        """`_count` for every running job of the snapshot, and `usage_hours` (the decayed
        use of finished jobs plus the running jobs' use so far): the start of a pass that
        tallies, a cost per running job on every pass, so `_count`'s steps are inline
        here (a call per running job was most of it), the slots per group are summed from
        the slots per user, and jobs per queue and user are counted only where a queue
        limits them."""
        snapshot, now = self.snapshot, self.now
        running, group_slots = self.running_slots, self.group_slots
        seconds = dict(snapshot.usage)
        for job in snapshot.running:
            user, slots = job.user, job.slots
            running[user] = running.get(user, 0) + slots
            elapsed = now - job.start_time
            seconds[user] = seconds.get(user, 0.0) + slots * (elapsed if elapsed > 0.0 else 0.0)
        groups = snapshot.groups
        for user, slots in running.items():
            group = groups.get(user, "default") if groups else "default"
            group_slots[group] = group_slots.get(group, 0) + slots
        if self._limits:
            queue_running, user_running = self.queue_running, self.user_running
            for job in snapshot.running:
                if not job.part:  # a job's other hosts' parts count its slots only
                    queue, user = job.queue, job.user
                    queue_running[queue] = queue_running.get(queue, 0) + 1
                    user_running[queue, user] = user_running.get((queue, user), 0) + 1
        self.usage_hours = {user: s / 3600.0 for user, s in seconds.items()}

    def _limit(self, queue: QueueRecord, user: str) -> WaitReason | None:
        if (
            queue.max_running is not None
            and self.queue_running.get(queue.name, 0) >= queue.max_running
        ):
            return why.queue_limit(queue.name, queue.max_running)
        if (
            queue.max_running_per_user is not None
            and self.user_running.get((queue.name, user), 0) >= queue.max_running_per_user
        ):
            return why.user_limit(user, queue.name, queue.max_running_per_user)
        return None

    def _placed_task(self, array: int) -> None:
        """One more task of `array` placed in this pass (its concurrency limit counts it)."""
        placed = self.placed_per_array
        if placed is None:
            placed = self.placed_per_array = {}
        placed[array] = placed.get(array, 0) + 1

    def _room(self, number: int) -> int | None:
        limit, active = self.snapshot.array_limits[number]
        if limit is None:
            return None
        placed = self.placed_per_array
        return limit - active - (placed.get(number, 0) if placed is not None else 0)

    def _try(self, item: Item, queue: QueueRecord, policy: QueuePolicy) -> None:
        spec = item.spec
        is_job = type(item) is PendingJob
        key = item.job_id if isinstance(item, PendingJob) else str(item.number)
        if self._held(item, spec, queue, key, is_job):
            return
        if isinstance(item, PendingJob):
            self._try_job(item, spec, queue, policy, key)
        else:
            self._try_array(item, spec, queue, policy, key)

    def _held(self, item: Item, spec: JobSpec, queue: QueueRecord, key: str, is_job: bool) -> bool:
        """Whether a gate before any host search holds `item` back (inactive queue, an
        array's limits, dependencies, begin time, reservation target): its reason is then
        recorded, and for a job shared with the jobs of the same spec where it lasts."""
        reasons = self.result.reasons
        if not queue.active:
            reasons[key] = why.queue_inactive(queue.name)
            if is_job:
                self._blocked[id(spec)] = reasons[key]
            return True
        if not is_job:
            limited = self._limit(queue, spec.user)
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
                    self._blocked[id(spec)] = problem
                return True
        return False

    def _try_job(
        self, item: PendingJob, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, key: str
    ) -> None:
        """One job (or one requeued array task) past the gates: limits, licenses, a host."""
        reasons = self.result.reasons
        if item.index is not None:
            left = self._room(item.number)
            if left is not None and left <= 0:
                reasons[key] = why.ARRAY_LIMIT
                return
        blocked = self._blocked.get(id(spec))
        if blocked is not None:  # free resources and limits only shrink in a pass
            reasons[key] = blocked
            return
        if queue.max_running is not None or queue.max_running_per_user is not None:
            limited = self._limit(queue, spec.user)
            if limited:
                reasons[key] = self._blocked[id(spec)] = limited
                return
        if spec.licenses:  # free licenses only shrink in a pass, like limits
            short = self.devices.short_license(spec)
            if short:
                reasons[key] = self._blocked[id(spec)] = short
                return
        host = self._place(key, spec, queue, policy)
        if host is None:
            # the job's shape waits as it does, without the reservation it may hold
            self._blocked[id(spec)] = reasons[key].without_reservation()
        else:
            array = item.number if item.index is not None else None
            self._commit(key, spec, host, array)

    def _try_array(
        self, item: PendingArray, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, key: str
    ) -> None:
        """An array's pending tasks, in order, while its limit, the queue's and the
        licenses allow and a host is found."""
        reasons = self.result.reasons
        left = self._room(item.number)
        if left is not None and left <= 0:
            reasons[key] = why.ARRAY_LIMIT
            return
        for index in item.pending:
            if left is not None and left <= 0:
                break
            limited = self._limit(queue, spec.user)
            if limited:
                reasons[key] = limited
                break
            short = self.devices.short_license(spec) if spec.licenses else None
            if short:
                reasons[key] = short
                break
            host = self._place(key, spec, queue, policy)
            if host is None:
                break
            self._commit(task_id(item.number, index), spec, host, item.number)
            if left is not None:
                left -= 1

    def _commit(
        self, job_id: str, spec: JobSpec, i: int | multihost.Shares, array: int | None
    ) -> None:
        if type(i) is list:
            self._commit_shares(job_id, spec, i, array)
            return
        assert isinstance(i, int)
        self.pool.take(i, spec.slots, spec.memory_mb, spec.walltime_s)
        if self.reservation is not None:
            self.reservation.took(i, spec.slots, spec.memory_mb, spec.walltime_s, self.now)
        devices: tuple[str, ...] = ()
        if spec.gres:
            devices = self.devices.take(i, gres.counts_of(spec.gres))
        if spec.licenses:
            self.devices.take_licenses(spec)
        self.result.placements.append(Placement(job_id, self.pool.hosts[i].name, devices))
        if self._tally:
            self._count(spec.user, spec.queue, spec.slots)
        if array is not None:
            self._placed_task(array)

    def _commit_shares(
        self, job_id: str, spec: JobSpec, shares: multihost.Shares, array: int | None
    ) -> None:
        """A multi-host placement: every share taken at once (all or nothing)."""
        pool, res, wall = self.pool, self.reservation, spec.walltime_s
        for i, slots in shares:
            mem = host_memory_mb(spec, slots)
            pool.take(i, slots, mem, wall)
            if res is not None:
                res.took(i, slots, mem, wall, self.now)
        if spec.licenses:
            self.devices.take_licenses(spec)
        asked = gres.counts_of(spec.gres)  # `--gpus N` is N on every host of the job
        hosts = tuple(
            HostSlots(pool.hosts[i].name, slots, self.devices.take(i, asked) if asked else ())
            for i, slots in shares
        )
        self.result.placements.append(
            Placement(job_id, hosts[0].host, hosts[0].devices, hosts=hosts)
        )
        self._count(spec.user, spec.queue, spec.slots)
        if array is not None:
            self._placed_task(array)

    def _place(
        self, key: str, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy
    ) -> int | multihost.Shares | None:
        """A host for `spec` now (several for a multi-host job), or None with the reason
        recorded (and maybe a reservation)."""
        if spec.exclusive or spec.resources:
            req = parse_requirement(spec.resources) if spec.resources else None
            if multihost.spreads(spec, req):
                return self._place_spread(key, spec, queue, policy, req)
        shape = self._shape(queue, spec)
        found = self._sets.get(shape)
        if found is None:
            found = self._sets[shape] = self._candidates(spec, queue, policy)
        if isinstance(found, WaitReason):
            if found is why.TOO_BIG and self._may_spread(spec, queue, policy):
                return self._place_spread(
                    key,
                    spec,
                    queue,
                    policy,
                    None if not spec.resources else parse_requirement(spec.resources),
                )
            self.result.reasons[key] = found
            return None
        res, now, gate = self.reservation, self.now, self.gate
        slots, mem, wall = spec.slots, spec.memory_mb, spec.walltime_s
        allow = None if res is None else (lambda i: res.allows(i, slots, mem, wall, now))
        if spec.gres:  # a host without the devices now lacks them for the rest of the pass
            allow = self._with_devices(spec, allow)
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
        reason = self._sets[shape] = refused or why.ROOM
        if refused is None and spec.gres and self._devices_short(spec, queue):
            reason = self._sets[shape] = waiting_reason(spec)
        if res is None and policy.reserve is not None and not spec.reservation:
            made = self._reserve_host(key, spec, queue, policy.reserve)
            if made is not None and refused is None:
                reason = reason.holding(made.describe())
        self.result.reasons[key] = reason
        return None

    def _reserve_host(
        self, key: str, spec: JobSpec, queue: QueueRecord, reserve: ReservePlugin
    ) -> Reservation | None:
        """The pass's one reservation (EASY), made for `key` when no host has room now;
        outside the advance reservations' windows when the cluster has any."""
        gate, now = self.gate, self.now
        hosts = self._filter(spec, queue, self.policies[queue.name])
        if spec.gres:  # only hosts that have the devices at all (their release times
            # are judged by slots and memory: the reservation is a lower bound)
            hosts = with_devices(self.pool.hosts, hosts, spec)
        made = (
            reserve.reserve(self.pool, hosts, spec, now)
            if gate is None
            else gate.reserve(reserve, hosts, spec, effective_walltime(spec, queue))
        )
        if made is not None:
            made.job_id = key
            self.reservation = made
            self.result.reservations.append(made.to_plain())
        return made
