"""Free resources of every host during one pass, indexed so that placement is cheap.

Within a pass free slots and memory only go down. So for one job *shape* (queue, slots,
memory, resource string, walltime) a host that cannot take it now never will in this pass,
and a shape that found no host stays without one. `CandidateSet` exploits both: it keeps
the hosts a shape may use in a heap ordered by score and drops for good every host it finds
too full, so placing n jobs of one shape over h hosts costs O((n + h) log h) instead of
O(n h). Scores that depend on free resources (pack, spread, order[-slots]) are refreshed
lazily: each placement bumps the host's version and pushes its new key; older entries are
skipped when they come to the top.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from xce.sched.expr import Node, host_attributes, matches
from xce.sched.snapshot import Snapshot

INFINITY = float("inf")


class HostPool:
    """Hosts by index (the snapshot's name order) with this pass's free slots and memory."""

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.hosts = snapshot.hosts
        self.now = now
        self.index = {h.name: i for i, h in enumerate(self.hosts)}
        self.free_slots = [h.free_slots for h in self.hosts]
        self.free_mem = [h.free_memory_mb for h in self.hosts]
        self.version = [0] * len(self.hosts)
        self.total_free_slots = sum(max(0, h.free_slots) for h in self.hosts if h.schedulable)
        self._running = snapshot.running
        self._placed: list[tuple[int, float, int, int]] = []
        self._releases: list[list[tuple[float, int, int]]] | None = None
        self.dynamic_sets: list[CandidateSet] = []

    def attributes(self, i: int) -> dict[str, str | int | float]:
        """What a resource expression sees of host `i`, with this pass's placements."""
        attrs = host_attributes(self.hosts[i])
        attrs["slots"] = self.free_slots[i]
        attrs["mem"] = self.free_mem[i]
        return attrs

    def take(self, i: int, slots: int, memory_mb: int, walltime_s: int | None) -> None:
        """Place a job of this size on host `i` (it frees them at now + walltime)."""
        self.free_slots[i] -= slots
        self.free_mem[i] -= memory_mb
        self.total_free_slots -= slots
        self.version[i] += 1
        end = INFINITY if walltime_s is None else self.now + walltime_s
        if self._releases is not None:
            self._releases[i].append((end, slots, memory_mb))
        else:
            self._placed.append((i, end, slots, memory_mb))
        for candidates in self.dynamic_sets:
            candidates.refresh(i)

    def releases(self, i: int) -> list[tuple[float, int, int]]:
        """(time, slots, memory) host `i` gets back as its jobs reach their walltime; jobs
        without one never give theirs back; overdue jobs are expected to end now."""
        if self._releases is None:
            table: list[list[tuple[float, int, int]]] = [[] for _ in self.hosts]
            for job in self._running:
                at = self.index.get(job.host)
                if at is None:
                    continue
                end = (INFINITY if job.walltime_s is None
                       else max(self.now, job.start_time + job.walltime_s))
                table[at].append((end, job.slots, job.memory_mb))
            for at, end, slots, mem in self._placed:
                table[at].append((end, slots, mem))
            self._releases = table
        return sorted(self._releases[i])


class CandidateSet:
    """The hosts one job shape may use, best first; see the module docstring."""

    __slots__ = ("_heap", "_key", "_pool", "dynamic", "live_select", "memory_mb", "slots")

    def __init__(self, pool: HostPool, hosts: Sequence[int], slots: int, memory_mb: int,
                 key: Callable[[int], tuple], dynamic: bool, live_select: Node | None) -> None:
        self._pool = pool
        self._key = key
        self.slots = slots
        self.memory_mb = memory_mb
        self.dynamic = dynamic
        self.live_select = live_select
        version = pool.version
        self._heap = [(key(i), i, version[i]) for i in hosts]
        heapq.heapify(self._heap)
        if dynamic:
            pool.dynamic_sets.append(self)

    def find(self, allow: Callable[[int], bool] | None = None) -> int | None:
        """The best host that has room now (and that `allow` accepts), or None."""
        heap = self._heap
        free_slots, free_mem, version = self._pool.free_slots, self._pool.free_mem, \
            self._pool.version
        slots, memory_mb, dynamic, live = self.slots, self.memory_mb, self.dynamic, \
            self.live_select
        while heap:
            _, i, seen = heap[0]
            if dynamic and seen != version[i]:
                heapq.heappop(heap)  # a fresher entry for this host is in the heap
                continue
            if (free_slots[i] >= slots and free_mem[i] >= memory_mb
                    and (live is None or matches(live, self._pool.attributes(i)))
                    and (allow is None or allow(i))):
                return i
            heapq.heappop(heap)  # too full for this shape for the rest of the pass
        if dynamic:
            self._pool.dynamic_sets.remove(self)
        return None

    def refresh(self, i: int) -> None:
        heapq.heappush(self._heap, (self._key(i), i, self._pool.version[i]))
