"""A read-only view of what the scheduler needs, taken from `ClusterState` in one pass.

The scheduler never sees `ClusterState` itself: it gets plain immutable values, so a pass can
run off the event loop (or in another process) while the state moves on.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.core.arrayspec import IndexSet
from xce.core.deps import DepStatus, evaluate
from xce.core.model import HostStatus, JobSpec, QueueRecord
from xce.core.state import ClusterState


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    slots: int
    memory_mb: int
    free_slots: int
    free_memory_mb: int
    attributes: tuple[tuple[str, str], ...]
    schedulable: bool


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    number: int
    index: int | None
    spec: JobSpec
    deps: DepStatus


@dataclass(frozen=True, slots=True)
class PendingArray:
    number: int
    spec: JobSpec
    pending: IndexSet
    max_concurrent: int | None
    active: int
    deps: DepStatus


@dataclass(frozen=True, slots=True)
class Snapshot:
    hosts: tuple[HostView, ...]
    queues: dict[str, QueueRecord]
    jobs: tuple[PendingJob, ...]
    arrays: tuple[PendingArray, ...]
    # number -> (max_concurrent, active tasks) for every array with something pending
    array_limits: dict[int, tuple[int | None, int]]


def snapshot_of(state: ClusterState) -> Snapshot:
    hosts = []
    for host in sorted(state.hosts.values(), key=lambda h: h.name):
        load = state.host_load.get(host.name)
        used_slots = load.slots if load else 0
        used_mem = load.memory_mb if load else 0
        hosts.append(
            HostView(
                host.name, host.slots, host.memory_mb, host.slots - used_slots,
                host.memory_mb - used_mem, host.attributes, host.status is HostStatus.ONLINE,
            )
        )

    def deps(spec: JobSpec) -> DepStatus:
        return evaluate(spec.dependency, state) if spec.dependency else DepStatus.SATISFIED

    jobs = tuple(
        PendingJob(j.id, j.number, j.array_index, j.spec, deps(j.spec))
        for j in (state.jobs[i] for i in state.pending)
    )
    arrays = tuple(
        PendingArray(a.id, a.spec, a.pending, a.max_concurrent, a.active, deps(a.spec))
        for a in (state.arrays[n] for n in state.pending_arrays)
        if not a.held
    )
    # Requeued tasks are ordinary pending jobs, but their array's limit still applies.
    numbers = {a.number for a in arrays} | {j.number for j in jobs if j.index is not None}
    limits = {n: (state.arrays[n].max_concurrent, state.arrays[n].active) for n in numbers}
    return Snapshot(tuple(hosts), dict(state.queues), jobs, arrays, limits)
