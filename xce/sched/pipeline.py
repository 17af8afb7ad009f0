"""The scheduling pass: order pending jobs -> filter hosts -> score hosts -> place or reserve.

`plan(snapshot, now)` is pure: it reads the snapshot and returns a `Plan`, and the live
controller and the simulator (xce/sched/simulate.py) both call it, so they decide alike.

Queues are taken in strict priority order (higher `priority` first). Within one priority,
the queues that order by `fcfs` are merged by submission, then each queue with another
order plugin (fairshare) follows, by name. Every queue uses its own plugins
(`QueueRecord.plugins`, see xce/sched/plugins). Jobs of the same *shape* share the work of
finding hosts (xce/sched/hostpool.py), so a pass is near linear in pending jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable
from typing import Any

from xce.core import gres
from xce.core.allocation import host_memory_mb
from xce.core.deps import DepStatus
from xce.core.model import HostSlots, JobSpec, QueueRecord, task_id
from xce.sched import multihost
from xce.sched import reasons as why
from xce.sched.advance import AdvanceGate, effective_walltime
from xce.sched.expr import (
    parse_requirement,
)
from xce.sched.gres import DevicePool, too_few, waiting_reason, with_devices
from xce.sched.hostpool import CandidateSet, HostPool, OrderedCandidates, RankedCandidates
from xce.sched.plugins import PluginRegistry, QueuePolicy, builtin
from xce.sched.plugins.base import Item, OrderContext
from xce.sched.ranking import FREE_ATTRIBUTES, key_function, select_names
from xce.sched.reasons import WaitReason
from xce.sched.reservation import Reservation
from xce.sched.snapshot import PendingJob, Snapshot
from xce.sched.types import Placement, Plan


def plan(
    snapshot: Snapshot, now: float, explain: bool = True, registry: PluginRegistry | None = None
) -> Plan:
    """Placements to make now on `snapshot`, why the rest waits, and any reservation.

    With `explain=False` (the simulator) the same placements come back without a reason
    for every waiting job: the pass then stops as soon as nothing more can start (the
    cluster is full, or a strict FCFS queue blocks) instead of naming why each of the
    rest waits, so its cost follows the jobs it tries, not the length of the queue.
    `registry` names the plugins queues may choose (the built-in ones by default)."""
    return SchedulingPass(snapshot, now, explain, registry).run()


class SchedulingPass:
    """One pass over one snapshot; not reusable."""

    def __init__(
        self,
        snapshot: Snapshot,
        now: float,
        explain: bool = True,
        registry: PluginRegistry | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self.explain = explain
        self.pool = HostPool(snapshot, now)
        self.devices = DevicePool(snapshot.hosts, snapshot.licenses)
        self.result = Plan()
        self.reservation: Reservation | None = None
        # Advance reservations (xce/sched/advance.py); None when the cluster has none, so
        # a pass without them costs what it did before.
        self.gate = (
            AdvanceGate(snapshot.reservations, self.pool, now) if snapshot.reservations else None
        )
        plugins = registry or builtin()
        self.policies = {name: plugins.policy_for(q.plugins) for name, q in snapshot.queues.items()}
        self._sets: dict[tuple, CandidateSet | WaitReason] = {}
        self._filtered: dict[tuple[str, str], list[int]] = {}
        self._spread_hosts: dict[tuple, list[int]] = {}  # multi-host shape -> its hosts
        self._spreadable: dict[tuple[str, str, int], bool] = {}
        # (queue, resources) -> hosts ranked once (static) or a heap to copy (dynamic)
        self._rankings: dict[tuple[str, str], tuple[Any, int]] = {}
        self._key_functions: dict[tuple[str, str], tuple[Callable[[int], tuple], bool, bool]] = {}
        # id(JobSpec) -> why jobs sharing that spec object cannot start in this pass
        self._blocked: dict[int, WaitReason] = {}
        self.running_slots: dict[str, int] = {}
        self.group_slots: dict[str, int] = {}
        self.queue_running: dict[str, int] = {}
        self.user_running: dict[tuple[str, str], int] = {}
        self.placed_per_array: dict[int, int] = {}
        # Running tallies feed limits and the order plugins other than fcfs; a pass that
        # has neither (plain FCFS, EASY) skips them: a cost per running job per pass.
        queues = snapshot.queues.values()
        self._tally = any(
            q.max_running is not None or q.max_running_per_user is not None for q in queues
        ) or any(p.reads_usage for p in self.policies.values())
        # no queue makes reservations (first-fit): a job wider than the free slots is
        # passed over at once in the simulator's loop
        self._no_reserve = all(p.reserve is None for p in self.policies.values())
        self.usage_hours: dict[str, float] = {}
        if self._tally:
            seconds = dict(snapshot.usage)
            for job in snapshot.running:
                self._count(job.user, job.queue, job.slots, 0 if job.part else 1)
                seconds[job.user] = seconds.get(job.user, 0.0) + job.slots * max(
                    0.0, now - job.start_time
                )
            self.usage_hours = {user: s / 3600.0 for user, s in seconds.items()}

    def _count(self, user: str, queue: str, slots: int, jobs: int = 1) -> None:
        if not self._tally:
            return
        running = self.running_slots
        running[user] = running.get(user, 0) + slots
        group = self.snapshot.groups.get(user, "default") if self.snapshot.groups else "default"
        self.group_slots[group] = self.group_slots.get(group, 0) + slots
        self.queue_running[queue] = self.queue_running.get(queue, 0) + jobs
        self.user_running[queue, user] = self.user_running.get((queue, user), 0) + jobs

    # --- ordering -----------------------------------------------------------------------

    def _groups(self) -> list[tuple[tuple[int, int, str], Collection[Item]]]:
        """Items by (priority level, order group), each sorted by submission (an array
        before its requeued tasks, tasks by index). A queue that is alone in its group and
        comes already ordered (`Snapshot.queued`) is handed on as it is, not copied."""
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
        reasons, blocked = self.result.reasons, self._blocked
        satisfied = DepStatus.SATISFIED
        arrays_done: set[int] = set()
        explain = self.explain
        for (_, _, queue_name), items in groups:
            queue = queues[queue_name or next(iter(items)).spec.queue]
            ctx = OrderContext(
                self.now,
                queue,
                self.usage_hours,
                self.snapshot.groups,
                self.running_slots,
                self.group_slots,
                self.snapshot,
            )
            ordered = policies[queue.name].order.order(items, ctx)
            if not explain:
                if self._run_quiet(ordered):
                    return self.result
                continue
            for item in ordered:
                if pool.total_free_slots <= 0:
                    self._no_room_left(groups, arrays_done)
                    return self.result
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
                policy = policies[name]
                self._try(item, queues[name], policy)
        return self.result

    def _run_quiet(self, ordered: Iterable[Item]) -> bool:
        """The simulator's loop (`explain=False`): the same placements as the loop in
        `run`, without naming why the rest waits; True when the pass is over (no free slot
        left, or a strict order blocked).

        A minimal simulator compares two numbers per waiting job, so this loop does too
        for the jobs that surely cannot start: a job wider than the free slots is passed
        over with no call at all when trying it could make no reservation (one is held
        already, or no queue makes any)."""
        queues, policies, pool = self.snapshot.queues, self.policies, self.pool
        reasons, blocked = self.result.reasons, self._blocked
        satisfied = DepStatus.SATISFIED
        no_reserve = self._no_reserve
        skip_wide = no_reserve or self.reservation is not None
        for item in ordered:
            free = pool.total_free_slots
            if free <= 0:
                return True
            spec = item.spec
            if skip_wide and spec.slots > free:
                continue  # as _cannot_start would say, from one comparison
            if type(item) is PendingJob and item.index is None and item.deps is satisfied:
                known = blocked.get(id(spec))
                if known is not None:
                    reasons[item.job_id] = known
                    continue
            name = spec.queue
            policy = policies[name]
            if self._cannot_start(spec, policy):
                continue
            self._try(item, queues[name], policy)
            res = self.reservation
            if res is not None:
                if res.host < 0:
                    return True  # strict order: nothing behind a blocked job starts
                skip_wide = True
        return False

    def _cannot_start(self, spec: JobSpec, policy: QueuePolicy) -> bool:
        """Whether `spec` surely cannot start now and trying would change nothing (it
        would make no reservation), from counts alone: the simulator's shortcut past the
        long tail of a queue, where a minimal simulator compares two numbers per job."""
        pool, res = self.pool, self.reservation
        slots = spec.slots
        if res is None:
            return policy.reserve is None and slots > pool.total_free_slots
        if slots > pool.total_free_slots:
            return True
        wall = spec.walltime_s
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
        reasons = self.result.reasons
        placed = {p.job_id for p in self.result.placements}
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
                if item.deps is not DepStatus.SATISFIED:
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
                        shape = self._shape(queue, spec)
                        known = self._sets.get(shape)
                        if known is None:
                            known = self._sets[shape] = self._candidates(
                                spec, queue, self.policies[queue.name]
                            )
                        reason = known if isinstance(known, WaitReason) else why.ROOM
                        if reason is why.TOO_BIG and self._may_spread(
                            spec, queue, self.policies[queue.name]
                        ):
                            reason = self._spread_reason(spec, queue)  # issue 15
                    by_spec[id(spec)] = reason
                reasons[key] = reason

    # --- one job or array ---------------------------------------------------------------

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

    def _room(self, number: int) -> int | None:
        limit, active = self.snapshot.array_limits[number]
        return None if limit is None else limit - active - self.placed_per_array.get(number, 0)

    def _try(self, item: Item, queue: QueueRecord, policy: QueuePolicy) -> None:
        spec = item.spec
        is_job = type(item) is PendingJob
        key = item.job_id if isinstance(item, PendingJob) else str(item.number)
        reasons = self.result.reasons
        if not queue.active:
            reasons[key] = why.queue_inactive(queue.name)
            if is_job:
                self._blocked[id(spec)] = reasons[key]
            return
        if not is_job:
            limited = self._limit(queue, spec.user)
            if limited:
                reasons[key] = limited
                return
        if item.deps is not DepStatus.SATISFIED:
            reasons[key] = (
                why.DEPENDENCY if item.deps is DepStatus.WAITING else why.DEPENDENCY_NEVER
            )
            return
        if spec.begin_time is not None and spec.begin_time > self.now:
            reasons[key] = why.begin(spec.begin_time)
            return
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
                return
        if isinstance(item, PendingJob):
            if item.index is not None:
                left = self._room(item.number)
                if left is not None and left <= 0:
                    reasons[key] = why.ARRAY_LIMIT
                    return
            blocked = self._blocked.get(id(spec))
            if blocked is not None:  # free resources and limits only shrink in a pass
                reasons[key] = blocked
                return
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
            return
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
            self.placed_per_array[array] = self.placed_per_array.get(array, 0) + 1

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
            self.placed_per_array[array] = self.placed_per_array.get(array, 0) + 1

    # --- hosts --------------------------------------------------------------------------

    def _shape(self, queue: QueueRecord, spec: JobSpec) -> tuple:
        if self.gate is not None:  # the gate's verdict depends on walltime and target
            return (
                queue.name,
                spec.slots,
                spec.memory_mb,
                spec.resources,
                spec.walltime_s,
                spec.reservation,
                spec.gres,
            )
        wall = spec.walltime_s if self.reservation is not None else None
        return (queue.name, spec.slots, spec.memory_mb, spec.resources, wall, spec.gres)

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
            hosts = self._filtered[queue.name, spec.resources]
            if spec.gres:  # only hosts that have the devices at all (their release times
                # are judged by slots and memory: the reservation is a lower bound)
                hosts = with_devices(self.pool.hosts, hosts, spec)
            made = (
                policy.reserve.reserve(self.pool, hosts, spec, now)
                if gate is None
                else gate.reserve(policy.reserve, hosts, spec, effective_walltime(spec, queue))
            )
            if made is not None:
                made.job_id = key
                self.reservation = made
                self.result.reservations.append(made.to_plain())
                if refused is None:
                    reason = reason.holding(made.describe())
        self.result.reasons[key] = reason
        return None

    def _place_spread(
        self, key: str, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy, req: Any
    ) -> multihost.Shares | None:
        """Shares on several hosts now (xce/sched/multihost.py), or None with the reason
        recorded and, for the first such job under EASY, a reservation of a host set."""
        reasons = self.result.reasons
        shape = ("spread", *self._shape(queue, spec))
        known = self._sets.get(shape)
        if isinstance(known, WaitReason):
            reasons[key] = known
            return None
        hosts = self._filter(spec, queue, policy)
        if spec.gres:  # devices per host: only hosts that have them at all may take a share
            hosts = with_devices(self.pool.hosts, hosts, spec)
        if not hosts:
            reasons[key] = self._sets[shape] = why.NO_MATCH if spec.resources else why.NO_HOST
            return None
        pool, now, res = self.pool, self.now, self.reservation
        # The hosts of this shape, ranked when the shape is first tried in the pass (a
        # ranking on free resources is not re-sorted per job: one sort per shape and pass)
        # and pruned of hosts too full for any share (multihost.choose).
        ordered = self._spread_hosts.get(shape)
        if ordered is None:
            fkey = (queue.name, spec.resources)
            functions = self._key_functions.get(fkey)
            if functions is None:
                functions = self._key_functions[fkey] = key_function(pool, req, policy.score)
            rank = functions[0]
            ordered = (
                sorted(hosts, key=rank)
                if (req is not None and req.order) or policy.ranks
                else list(hosts)
            )
            self._spread_hosts[shape] = ordered
        layout = multihost.Layout.of(spec, req)
        groups = multihost.groups_of(pool, ordered, req)
        live = multihost.live_ok(pool, req)
        wall = spec.walltime_s
        views = pool.hosts
        gate = self.gate
        judged = effective_walltime(spec, queue) if gate is not None else None
        asked = gres.counts_of(spec.gres)
        has = self.devices.has

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
        reason = self._sets[shape] = self._spread_reason(spec, queue)
        # (a job with devices reserves no host set: the reservation does not count devices)
        if (
            reason is why.ROOM
            and res is None
            and policy.reserve is not None
            and not spec.reservation
            and not spec.gres
        ):
            if policy.host_sets:
                # every host the shape may use, ranked afresh (the list above was pruned of
                # the full ones, which are the ones that free later): once per pass
                rank = self._key_functions[queue.name, spec.resources][0]
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
            if made is not None:
                made.job_id = key
                self.reservation = made
                self.result.reservations.append(made.to_plain())
                reason = why.ROOM.holding(made.describe())
        reasons[key] = reason
        return None

    def _may_spread(self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy) -> bool:
        """A job with no span that no host can hold spreads when it is the slots that no
        host has (not the memory: `--mem` is per host, spreading would not lower it)."""
        if spec.resources and not multihost.span_allows_spreading(
            parse_requirement(spec.resources)
        ):
            return False
        key = (queue.name, spec.resources, spec.slots)
        known = self._spreadable.get(key)
        if known is None:
            views = self.pool.hosts
            known = self._spreadable[key] = all(
                views[i].slots < spec.slots for i in self._filter(spec, queue, policy)
            )
        return known

    def _spread_reason(self, spec: JobSpec, queue: QueueRecord) -> WaitReason:
        """Why a job that may spread waits: for slots, or for ever (its hosts together
        have fewer slots than it asks)."""
        hosts = self._filter(spec, queue, self.policies[queue.name])
        views = self.pool.hosts
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

    def _with_devices(
        self, spec: JobSpec, allow: Callable[[int], bool] | None
    ) -> Callable[[int], bool]:
        asked, has = gres.counts_of(spec.gres), self.devices.has
        if allow is None:
            return lambda i: has(i, asked)
        return lambda i: has(i, asked) and allow(i)

    def _devices_short(self, spec: JobSpec, queue: QueueRecord) -> bool:
        """Whether some candidate host has the slots and memory now but not the devices."""
        pool = self.pool
        return any(
            pool.free_slots[i] >= spec.slots and pool.free_mem[i] >= spec.memory_mb
            for i in self._filtered.get((queue.name, spec.resources), ())
        )

    def _filter(self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy) -> list[int]:
        """The hosts the queue's filters accept for `spec` (cached per queue and -R)."""
        fkey = (queue.name, spec.resources)
        hosts = self._filtered.get(fkey)
        if hosts is None:
            views = self.pool.hosts
            hosts = list(range(len(views)))
            for accepts, refuses_any in policy.filter_tests:
                if refuses_any is None or refuses_any(spec, queue):
                    hosts = [i for i in hosts if accepts(views[i], spec, queue)]
            self._filtered[fkey] = hosts
        return hosts

    def _candidates(
        self, spec: JobSpec, queue: QueueRecord, policy: QueuePolicy
    ) -> CandidateSet | WaitReason:
        pool = self.pool
        fkey = (queue.name, spec.resources)
        hosts = self._filter(spec, queue, policy)
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
        functions = self._key_functions.get(fkey)
        if functions is None:
            functions = self._key_functions[fkey] = key_function(pool, req, policy.score)
        key, dynamic, improving = functions
        cached = self._rankings.get(fkey)
        if not dynamic:
            if cached is None:
                ranked = (
                    sorted(hosts, key=key)
                    if (req is not None and req.order) or policy.ranks
                    else hosts
                )
                cached = self._rankings[fkey] = (ranked, 0)
            return OrderedCandidates(pool, cached[0], slots, mem, live)
        # A heap is a heap when copied; entries made stale since only ever got worse
        # unless the ranking is `improving`, which must see every change: rebuild then.
        if cached is None or (improving and cached[1] != pool.placements):
            heap = [(key(i), i, pool.version[i]) for i in hosts]
            heapq.heapify(heap)
            cached = self._rankings[fkey] = (heap, pool.placements)
        return RankedCandidates(pool, cached[0], slots, mem, key, improving, live)
