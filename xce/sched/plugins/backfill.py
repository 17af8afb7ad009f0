"""Reserve `backfill`: EASY backfilling (Lifka 1995; Mu'alem and Feitelson 2001).

The first job of the pass that fits nowhere gets a reservation: the earliest time at which
one of its hosts will have enough free slots and memory, counting each running job as
ending at its start + walltime (jobs without a walltime never end for this purpose). Later
jobs, of any queue, may start now only where they do not delay that start
(xce/sched/passes/reservation.py). Only one reservation is held at a time, as in EASY.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xce.core.model import JobSpec
from xce.sched.passes.hostpool import INFINITY, HostPool
from xce.sched.passes.reservation import Reservation


def earliest_start(
    pool: HostPool, i: int, slots: int, memory_mb: int
) -> tuple[float, int, int] | None:
    """(time, free slots, free memory then) when host `i` first has room, or None."""
    host = pool.hosts[i]
    if host.slots < slots or host.memory_mb < memory_mb:
        return None
    free_slots, free_mem = pool.free_slots[i], pool.free_mem[i]
    if free_slots >= slots and free_mem >= memory_mb:
        return pool.now, free_slots, free_mem
    for end, got_slots, got_mem in pool.releases(i):
        if end == INFINITY:
            return None
        free_slots += got_slots
        free_mem += got_mem
        if free_slots >= slots and free_mem >= memory_mb:
            return end, free_slots, free_mem
    return None


class EasyBackfill:
    name: ClassVar[str] = "backfill"
    kind: ClassVar[str] = "reserve"
    host_sets: ClassVar[bool] = True  # a multi-host job reserves a set of hosts
    blocks_queue: ClassVar[bool] = False  # jobs that fit the holes go ahead

    def reserve(
        self, pool: HostPool, hosts: Sequence[int], spec: JobSpec, now: float
    ) -> Reservation | None:
        return earliest_reservation(pool, hosts, spec)


def earliest_reservation(pool: HostPool, hosts: Sequence[int], spec: JobSpec) -> Reservation | None:
    """The host of `hosts` where `spec` can start first (by `pool.releases`), reserved."""
    best: tuple[float, int, int, int] | None = None
    for i in hosts:
        found = earliest_start(pool, i, spec.slots, spec.memory_mb)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], i, found[1], found[2])
    if best is None:
        return None
    start, i, free_slots, free_mem = best
    return Reservation(
        "", i, pool.hosts[i].name, start, free_slots - spec.slots, free_mem - spec.memory_mb
    )
