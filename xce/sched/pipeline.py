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

from collections.abc import Iterable

from xce.core.deps import DepStatus
from xce.core.model import JobSpec, QueueRecord, task_id
from xce.sched.expr import And, Compare, Name, Node, Not, Or, order_key, parse_requirement
from xce.sched.hostpool import CandidateSet, HostPool
from xce.sched.plugins import QueuePolicy, policy_for
from xce.sched.plugins.base import Item, OrderContext
from xce.sched.reservation import Reservation
from xce.sched.snapshot import PendingJob, Snapshot
from xce.sched.types import Placement, Plan

FREE_ATTRIBUTES = frozenset({"slots", "mem"})
WAITING = "waiting for free slots or memory"


def plan(snapshot: Snapshot, now: float) -> Plan:
    """Placements to make now on `snapshot`, why the rest waits, and any reservation."""
    return SchedulingPass(snapshot, now).run()


def _names(node: Node | None) -> set[str]:
    """Attribute names a select expression reads."""
    if node is None:
        return set()
    if isinstance(node, And | Or):
        return set().union(*(_names(i) for i in node.items))
    if isinstance(node, Not):
        return _names(node.item)
    if isinstance(node, Compare):
        return {o.name for o in (node.left, node.right) if isinstance(o, Name)}
    return {node.name}


class SchedulingPass:
    """One pass over one snapshot; not reusable."""

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now
        self.pool = HostPool(snapshot, now)
        self.result = Plan()
        self.reservation: Reservation | None = None
        self.policies = {name: policy_for(q.plugins) for name, q in snapshot.queues.items()}
        self._sets: dict[tuple, CandidateSet | str] = {}
        self._filtered: dict[tuple[str, str], list[int]] = {}
        self.running_slots: dict[str, int] = {}
        self.group_slots: dict[str, int] = {}
        self.queue_running: dict[str, int] = {}
        self.user_running: dict[tuple[str, str], int] = {}
        self.placed_per_array: dict[int, int] = {}
        groups = snapshot.groups
        seconds = dict(snapshot.usage)
        for job in snapshot.running:
            self._count(job.user, job.queue, job.slots)
            seconds[job.user] = seconds.get(job.user, 0.0) + job.slots * max(
                0.0, now - job.start_time)
        self.usage_hours = {user: s / 3600.0 for user, s in seconds.items()}
        self.group_of = lambda user: groups.get(user, "default")

    def _count(self, user: str, queue: str, slots: int) -> None:
        self.running_slots[user] = self.running_slots.get(user, 0) + slots
        group = self.snapshot.groups.get(user, "default")
        self.group_slots[group] = self.group_slots.get(group, 0) + slots
        self.queue_running[queue] = self.queue_running.get(queue, 0) + 1
        self.user_running[queue, user] = self.user_running.get((queue, user), 0) + 1

    # --- ordering -----------------------------------------------------------------------

    def _groups(self) -> list[tuple[tuple[int, int, str], list[tuple[tuple[int, int], Item]]]]:
        """Items by (priority level, order group), each sorted by submission."""
        queues = self.snapshot.queues
        groups: dict[tuple[int, int, str], list[tuple[tuple[int, int], Item]]] = {}
        keys: dict[str, tuple[int, int, str]] = {}
        for name, queue in queues.items():
            if self.policies[name].order.name == "fcfs":
                keys[name] = (-queue.priority, 0, "")
            else:
                keys[name] = (-queue.priority, 1, name)
        for job in self.snapshot.jobs:
            index = job.index if job.index is not None else -1
            groups.setdefault(keys[job.spec.queue], []).append(((job.number, index), job))
        for array in self.snapshot.arrays:
            groups.setdefault(keys[array.spec.queue], []).append(((array.number, -2), array))
        out = sorted(groups.items(), key=lambda kv: kv[0])
        for _, items in out:
            items.sort(key=lambda pair: pair[0])
        return out

    def run(self) -> Plan:
        for (_, _, queue_name), pairs in self._groups():
            items = [item for _, item in pairs]
            queue = self.snapshot.queues[queue_name or items[0].spec.queue]
            policy = self.policies[queue.name]
            ctx = OrderContext(self.now, queue, self.usage_hours, self.snapshot.groups,
                               self.running_slots, self.group_slots)
            ordered: Iterable[Item] = policy.order.order(items, ctx)
            queues, policies = self.snapshot.queues, self.policies
            for item in ordered:
                name = item.spec.queue
                self._try(item, queues[name], policies[name])
        return self.result

    # --- one job or array ---------------------------------------------------------------

    def _limit(self, queue: QueueRecord, user: str) -> str | None:
        if queue.max_running is not None and \
                self.queue_running.get(queue.name, 0) >= queue.max_running:
            return f"queue {queue.name} has reached its limit of {queue.max_running} " \
                   "running jobs"
        if queue.max_running_per_user is not None and \
                self.user_running.get((queue.name, user), 0) >= queue.max_running_per_user:
            return f"user {user} has reached the limit of {queue.max_running_per_user} " \
                   f"running jobs in queue {queue.name}"
        return None

    def _room(self, number: int) -> int | None:
        limit, active = self.snapshot.array_limits[number]
        return None if limit is None else limit - active - self.placed_per_array.get(number, 0)

    def _try(self, item: Item, queue: QueueRecord, policy: QueuePolicy) -> None:
        spec = item.spec
        is_job = type(item) is PendingJob
        key = item.job_id if is_job else str(item.number)  # type: ignore[union-attr]
        reasons = self.result.reasons
        if not queue.active:
            reasons[key] = f"queue {queue.name} is inactive"
            return
        if item.deps is not DepStatus.SATISFIED:
            reasons[key] = ("waiting for dependency" if item.deps is DepStatus.WAITING
                            else "dependency can never be satisfied")
            return
        if self.pool.total_free_slots <= 0 and spec.slots > 0:
            # Nothing can start: skip the host search, but still say why precisely.
            shape = self._shape(queue, spec)
            known = self._sets.get(shape)
            if known is None:
                known = self._sets[shape] = self._candidates(spec, queue, policy)
            reasons[key] = known if isinstance(known, str) else WAITING
            return
        limited = self._limit(queue, spec.user)
        if limited:
            reasons[key] = limited
            return
        if is_job:
            if item.index is not None:  # type: ignore[union-attr]
                left = self._room(item.number)
                if left is not None and left <= 0:
                    reasons[key] = "array concurrency limit reached"
                    return
            host = self._place(key, spec, queue, policy)
            if host is not None:
                array = item.number if item.index is not None else None  # type: ignore[union-attr]
                self._commit(key, spec, host, array)
            return
        left = self._room(item.number)
        if left is not None and left <= 0:
            reasons[key] = "array concurrency limit reached"
            return
        for index in item.pending:  # type: ignore[union-attr]
            if left is not None and left <= 0:
                break
            limited = self._limit(queue, spec.user)
            if limited:
                reasons[key] = limited
                break
            host = self._place(key, spec, queue, policy)
            if host is None:
                break
            self._commit(task_id(item.number, index), spec, host, item.number)
            if left is not None:
                left -= 1

    def _commit(self, job_id: str, spec: JobSpec, i: int, array: int | None) -> None:
        self.pool.take(i, spec.slots, spec.memory_mb, spec.walltime_s)
        if self.reservation is not None:
            self.reservation.took(i, spec.slots, spec.memory_mb, spec.walltime_s, self.now)
        self.result.placements.append(Placement(job_id, self.pool.hosts[i].name))
        self._count(spec.user, spec.queue, spec.slots)
        if array is not None:
            self.placed_per_array[array] = self.placed_per_array.get(array, 0) + 1

    # --- hosts --------------------------------------------------------------------------

    def _shape(self, queue: QueueRecord, spec: JobSpec) -> tuple:
        wall = spec.walltime_s if self.reservation is not None else None
        return (queue.name, spec.slots, spec.memory_mb, spec.resources, wall)

    def _place(self, key: str, spec: JobSpec, queue: QueueRecord,
               policy: QueuePolicy) -> int | None:
        """A host for `spec` now, or None with the reason recorded (and maybe a reservation)."""
        shape = self._shape(queue, spec)
        found = self._sets.get(shape)
        if found is None:
            found = self._sets[shape] = self._candidates(spec, queue, policy)
        if isinstance(found, str):
            self.result.reasons[key] = found
            return None
        res, now = self.reservation, self.now
        slots, mem, wall = spec.slots, spec.memory_mb, spec.walltime_s
        allow = None if res is None else (lambda i: res.allows(i, slots, mem, wall, now))
        host = found.find(allow)
        if host is not None:
            return host
        self._sets[shape] = WAITING
        reason = WAITING
        if res is None and policy.reserve is not None:
            hosts = self._filtered[queue.name, spec.resources]
            made = policy.reserve.reserve(self.pool, hosts, spec, now)
            if made is not None:
                made.job_id = key
                self.reservation = made
                self.result.reservations.append(made.to_plain())
                reason = f"{WAITING} ({made.describe()})"
        self.result.reasons[key] = reason
        return None

    def _candidates(self, spec: JobSpec, queue: QueueRecord,
                    policy: QueuePolicy) -> CandidateSet | str:
        pool = self.pool
        fkey = (queue.name, spec.resources)
        hosts = self._filtered.get(fkey)
        if hosts is None:
            filters = policy.filters
            hosts = [i for i, h in enumerate(pool.hosts)
                     if all(f.accepts(h, spec, queue) for f in filters)]
            self._filtered[fkey] = hosts
        if not hosts:
            return ("no online host matches the resource requirement" if spec.resources
                    else "no online host in the queue")
        slots, mem = spec.slots, spec.memory_mb
        views = pool.hosts
        big = [i for i in hosts if views[i].slots >= slots and views[i].memory_mb >= mem]
        if not big:
            return "no host is big enough"
        score = policy.score
        req = parse_requirement(spec.resources) if spec.resources else None
        if req is not None and req.order:
            dynamic = score.dynamic or any(k.name in FREE_ATTRIBUTES for k in req.order)

            def key(i: int) -> tuple:
                return (order_key(req, pool.attributes(i)), score.key(pool, i))
        else:
            dynamic = score.dynamic

            def key(i: int) -> tuple:
                return score.key(pool, i)
        live = None
        if req is not None and _names(req.select) & FREE_ATTRIBUTES:
            live = req.select
        return CandidateSet(pool, big, slots, mem, key, dynamic, live)
