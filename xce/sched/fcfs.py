"""First-come-first-served, first-fit placement: the default until the plugin engine.

Jobs are taken in (queue priority, submission) order; each goes to the first host, by name,
that is online, allowed by its queue, and has the free slots and memory it asks for. A job
that does not fit does not block later ones (no reservation yet).
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.core.deps import DepStatus
from xce.core.model import JobSpec, task_id
from xce.sched.expr import matches, order_key, parse_requirement
from xce.sched.snapshot import HostView, PendingArray, PendingJob, Snapshot
from xce.sched.types import Placement, Plan


@dataclass(slots=True)
class _Free:
    host: HostView
    slots: int
    memory_mb: int


def _fits(spec: JobSpec, free: _Free) -> bool:
    return free.slots >= spec.slots and free.memory_mb >= spec.memory_mb


def plan(snapshot: Snapshot, now: float) -> Plan:
    del now  # FCFS ignores time; the backfill plugin will use walltimes.
    result = Plan()
    free = [_Free(h, h.free_slots, h.free_memory_mb) for h in snapshot.hosts if h.schedulable]
    items: list[tuple[tuple[int, int, int], PendingJob | PendingArray]] = []
    for job in snapshot.jobs:
        prio = snapshot.queues[job.spec.queue].priority
        items.append(((-prio, job.number, job.index if job.index is not None else -1), job))
    for array in snapshot.arrays:
        prio = snapshot.queues[array.spec.queue].priority
        items.append(((-prio, array.number, -2), array))
    items.sort(key=lambda item: item[0])
    # Concurrency limits count tasks already active plus those placed in this pass.
    placed_per_array: dict[int, int] = {}

    def room(number: int) -> int | None:
        limit, active = snapshot.array_limits[number]
        return None if limit is None else limit - active - placed_per_array.get(number, 0)

    for _, item in items:
        spec = item.spec
        key = item.job_id if isinstance(item, PendingJob) else str(item.number)
        queue = snapshot.queues[spec.queue]
        if not queue.active:
            result.reasons[key] = f"queue {queue.name} is inactive"
            continue
        if item.deps is DepStatus.WAITING:
            result.reasons[key] = "waiting for dependency"
            continue
        if item.deps is DepStatus.NEVER:
            result.reasons[key] = "dependency can never be satisfied"
            continue
        candidates = _candidates(spec, queue.hosts, free)
        if isinstance(item, PendingJob):
            left = room(item.number) if item.index is not None else None
            if left is not None and left <= 0:
                result.reasons[key] = "array concurrency limit reached"
                continue
            host = next((f for f in candidates if _fits(spec, f)), None)
            if host is None:
                result.reasons[key] = _no_host_reason(spec, candidates)
                continue
            _take(host, spec)
            result.placements.append(Placement(item.job_id, host.host.name))
            if item.index is not None:
                placed_per_array[item.number] = placed_per_array.get(item.number, 0) + 1
            continue
        # A whole array: expand only as many indices as can start now.
        left = room(item.number)
        if left is not None and left <= 0:
            result.reasons[key] = "array concurrency limit reached"
            continue
        for index in item.pending:
            if left is not None and left <= 0:
                break
            host = next((f for f in candidates if _fits(spec, f)), None)
            if host is None:
                result.reasons[key] = _no_host_reason(spec, candidates)
                break
            _take(host, spec)
            result.placements.append(Placement(task_id(item.number, index), host.host.name))
            placed_per_array[item.number] = placed_per_array.get(item.number, 0) + 1
            if left is not None:
                left -= 1
    return result


def _attributes(f: _Free) -> dict[str, str | int | float]:
    """What a resource expression sees of a host, with this pass's placements counted."""
    return {**dict(f.host.attributes), "slots": f.slots, "maxslots": f.host.slots,
            "mem": f.memory_mb, "maxmem": f.host.memory_mb}


def _candidates(spec: JobSpec, queue_hosts: tuple[str, ...], free: list[_Free]) -> list[_Free]:
    """Hosts the queue allows and `select[]` accepts, ranked by `order[]` (else by name)."""
    hosts = [f for f in free if not queue_hosts or f.host.name in queue_hosts]
    if not spec.resources:
        return hosts
    req = parse_requirement(spec.resources)
    hosts = [f for f in hosts if matches(req.select, _attributes(f))]
    if req.order:
        hosts.sort(key=lambda f: order_key(req, _attributes(f)))
    return hosts


def _take(free: _Free, spec: JobSpec) -> None:
    free.slots -= spec.slots
    free.memory_mb -= spec.memory_mb


def _no_host_reason(spec: JobSpec, candidates: list[_Free]) -> str:
    if not candidates:
        if spec.resources:
            return "no online host matches the resource requirement"
        return "no online host in the queue"
    if all(f.host.slots < spec.slots or f.host.memory_mb < spec.memory_mb for f in candidates):
        return "no host is big enough"
    return "waiting for free slots or memory"
