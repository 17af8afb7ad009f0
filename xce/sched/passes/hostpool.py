"""Free resources of every host during one pass, indexed so that placement is cheap.

Within a pass free slots and memory only go down. So for one job *shape* (queue, slots,
memory, resource string, walltime) a host that cannot take it now never will in this pass,
and a shape that found no host stays without one. The candidate sets exploit both: each
keeps the hosts a shape may use, best first, and drops for good every host it finds too
full, so placing n jobs of one shape over h hosts costs O(n + h) (static ranking: a sorted
list and a cursor) or O((n + h) log h) (rankings on free resources: a heap), not O(n h).

Rankings on free resources are refreshed lazily. When a placement makes a host's key worse
(spread, `order[-slots]`), its stale entry is re-keyed when it reaches the top. When it can
make the key better (pack, `order[slots]`), the new key is pushed into every such set at
once; those sets are the ones whose cost grows with placements.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from xce.sched.expr import Node, host_attributes, matches
from xce.sched.snapshot import FreeTable, RunningJob, Snapshot

INFINITY = float("inf")
# Hosts above which a pass borrows its maker's free table instead of copying it (`HostPool`):
# side by side in replays, undoing a pass's takes cost about what copying 250 hosts' numbers
# did (1 us a pass).
BORROW_ABOVE = 256
Allow = Callable[[int], bool] | None


class HostPool:
    """Hosts by index (the snapshot's name order) with this pass's free slots and memory."""

    __slots__ = (
        "_expected",
        "_index",
        "_lent",
        "_placed",
        "_releases",
        "_running",
        "_static",
        "_versions",
        "expect",
        "expecting",
        "free_mem",
        "free_slots",
        "hosts",
        "improving_sets",
        "now",
        "placements",
        "total_free_slots",
    )

    def __init__(self, snapshot: Snapshot, now: float, borrow: bool = False) -> None:
        """With `borrow`, the free table the snapshot's maker keeps is, on a cluster of
        more than `BORROW_ABOVE` hosts, this pool's own until `give_back` (which its
        caller must call, `plan`): a pass then costs its placements, not a copy of every
        host's numbers (the simulator's pass on a thousand hosts copied 2,000 numbers to
        place one job). On fewer hosts the copy costs less than keeping what to undo."""
        self.hosts = hosts = snapshot.hosts
        self.now = now
        self._index: dict[str, int] | None = None
        # (host, slots, memory) of each take from a borrowed table, to give back
        self._lent: list[tuple[int, int, int]] | None = None
        table = snapshot.free
        if table is not None and table.hosts is hosts:  # kept by the snapshot's maker
            # beside these very views: borrowed or copied, not read per host
            if borrow and len(hosts) > BORROW_ABOVE:
                self.free_slots, self.free_mem = table.slots, table.memory_mb
                self._lent = []
            else:
                self.free_slots, self.free_mem = table.slots.copy(), table.memory_mb.copy()
        else:  # read from the views, into lists of this pass's own
            table = FreeTable.of(hosts)
            self.free_slots, self.free_mem = table.slots, table.memory_mb
        self.total_free_slots = table.total
        # placements per host so far: made when a ranking on free resources first needs
        # them (`versions`); most passes rank none
        self._versions: list[int] | None = None
        self.placements = 0
        self._running = snapshot.running
        # (host, end by walltime, expected end, slots, memory) of each job placed so far
        self._placed: list[tuple[int, float, float, int, int]] = []
        self._releases: list[list[tuple[float, int, int]]] | None = None
        # Run-time predictions (xce/sched/predict.py), set by a pass that predicts:
        # `expect` gives a running job's expected end, and while `expecting` `releases`
        # answers by expected ends instead of walltimes (a predictive reservation).
        self.expect: Callable[[RunningJob], float] | None = None
        self.expecting = False
        self._expected: list[list[tuple[float, int, int]]] | None = None
        # host index -> its attributes, as read (only a pass with -R reads any)
        self._static: dict[int, dict[str, str | int | float]] | None = None
        self.improving_sets: list[RankedCandidates] = []

    @property
    def index(self) -> dict[str, int]:
        """Host name -> index; built when first read (reservations), not on every pass."""
        if self._index is None:
            self._index = {h.name: i for i, h in enumerate(self.hosts)}
        return self._index

    def static_attributes(self, i: int) -> dict[str, str | int | float]:
        """Host `i`'s attributes as at the start of the pass (cached; do not modify)."""
        static = self._static
        if static is None:
            static = self._static = {}
        found = static.get(i)
        if found is None:
            found = static[i] = host_attributes(self.hosts[i])
        return found

    def attributes(self, i: int) -> dict[str, str | int | float]:
        """What a resource expression sees of host `i`, with this pass's placements."""
        attrs = dict(self.static_attributes(i))
        attrs["slots"] = self.free_slots[i]
        attrs["mem"] = self.free_mem[i]
        return attrs

    def versions(self) -> list[int]:
        """Per host, how many placements this pass made on it (a ranking's entry made
        before the last one is stale), counted from the first call on."""
        versions = self._versions
        if versions is None:
            versions = self._versions = [0] * len(self.hosts)
        return versions

    def take(
        self,
        i: int,
        slots: int,
        memory_mb: int,
        walltime_s: int | None,
        expected_s: float | None = None,
    ) -> None:
        """Place a job of this size on host `i` (it frees them at now + walltime, and is
        expected to at now + `expected_s` in a pass that predicts, `expect`)."""
        self.free_slots[i] -= slots
        self.free_mem[i] -= memory_mb
        if self._lent is not None:
            self._lent.append((i, slots, memory_mb))
        self.total_free_slots -= slots
        if self._versions is not None:
            self._versions[i] += 1
        self.placements += 1
        end = INFINITY if walltime_s is None else self.now + walltime_s
        expected = end
        if self.expect is not None:
            expected = INFINITY if expected_s is None else self.now + expected_s
            if self._expected is not None:
                self._expected[i].append((expected, slots, memory_mb))
        if self._releases is not None:
            self._releases[i].append((end, slots, memory_mb))
        self._placed.append((i, end, expected, slots, memory_mb))
        for candidates in self.improving_sets:
            candidates.refresh(i)

    def give_back(self) -> None:
        """A borrowed free table as it was lent: every take undone (nothing if not
        borrowed). The pool's numbers are then the snapshot's again, not this pass's."""
        lent = self._lent
        if lent:
            free_slots, free_mem = self.free_slots, self.free_mem
            for i, slots, memory_mb in reversed(lent):
                free_slots[i] += slots
                free_mem[i] += memory_mb
            lent.clear()

    def releases(self, i: int) -> list[tuple[float, int, int]]:
        """(time, slots, memory) host `i` gets back as its jobs reach their walltime; jobs
        without one never give theirs back; overdue jobs are expected to end now. While
        `expecting`, by the jobs' expected ends instead (`expected_releases`)."""
        if self.expecting and self.expect is not None:
            return self.expected_releases(i)
        if self._releases is None:
            table: list[list[tuple[float, int, int]]] = [[] for _ in self.hosts]
            index, now = self.index, self.now
            for job in self._running:
                at = index.get(job.host)
                if at is None:
                    continue
                wall = job.walltime_s
                end = INFINITY if wall is None else job.start_time + wall
                table[at].append((now if end < now else end, job.slots, job.memory_mb))
            for at, end, _, slots, mem in self._placed:
                table[at].append((end, slots, mem))
            self._releases = table
        return sorted(self._releases[i])

    def expected_releases(self, i: int) -> list[tuple[float, int, int]]:
        """`releases` by run-time predictions: each running job's expected end (`expect`,
        extended while it outlives its prediction) and each placed job's."""
        expect = self.expect
        assert expect is not None  # (set by a pass that predicts)
        if self._expected is None:
            table: list[list[tuple[float, int, int]]] = [[] for _ in self.hosts]
            index, now = self.index, self.now
            for job in self._running:
                at = index.get(job.host)
                if at is None:
                    continue
                end = expect(job)
                table[at].append((now if end < now else end, job.slots, job.memory_mb))
            for at, _, end, slots, mem in self._placed:
                table[at].append((end, slots, mem))
            self._expected = table
        return sorted(self._expected[i])

    def fits(self, i: int, slots: int, memory_mb: int, live: Node | None) -> bool:
        return (
            self.free_slots[i] >= slots
            and self.free_mem[i] >= memory_mb
            and (live is None or matches(live, self.attributes(i)))
        )


class OrderedCandidates:
    """A static ranking: the hosts in a fixed order and a cursor past the ones too full."""

    __slots__ = ("_at", "_hosts", "_pool", "live_select", "memory_mb", "slots")

    def __init__(
        self,
        pool: HostPool,
        hosts: Sequence[int],
        slots: int,
        memory_mb: int,
        live_select: Node | None,
    ) -> None:
        self._pool, self._hosts, self._at = pool, hosts, 0
        self.slots, self.memory_mb, self.live_select = slots, memory_mb, live_select

    def find(self, allow: Allow = None) -> int | None:
        hosts, at, pool = self._hosts, self._at, self._pool
        free_slots, free_mem = pool.free_slots, pool.free_mem
        slots, memory_mb, live = self.slots, self.memory_mb, self.live_select
        end = len(hosts)
        while at < end:
            i = hosts[at]
            if (
                free_slots[i] >= slots
                and free_mem[i] >= memory_mb
                and (live is None or matches(live, pool.attributes(i)))
                and (allow is None or allow(i))
            ):
                self._at = at
                return i
            at += 1
        self._at = at
        return None


class RankedCandidates:
    """A ranking on free resources: a heap of (key, host, version), re-keyed lazily."""

    __slots__ = (
        "_heap",
        "_key",
        "_pool",
        "_versions",
        "improving",
        "live_select",
        "memory_mb",
        "slots",
    )

    def __init__(
        self,
        pool: HostPool,
        heap: Sequence[tuple[tuple, int, int]],
        slots: int,
        memory_mb: int,
        key: Callable[[int], tuple],
        improving: bool,
        live_select: Node | None,
    ) -> None:
        self._pool, self._key, self._versions = pool, key, pool.versions()
        self.slots, self.memory_mb, self.live_select = slots, memory_mb, live_select
        self.improving = improving
        self._heap = list(heap)  # a heap of (key, host, version), copied: not shared
        if improving:
            pool.improving_sets.append(self)

    def find(self, allow: Allow = None) -> int | None:
        heap, pool = self._heap, self._pool
        version = self._versions
        slots, memory_mb, live, improving = (
            self.slots,
            self.memory_mb,
            self.live_select,
            self.improving,
        )
        while heap:
            _, i, seen = heap[0]
            if seen != version[i]:
                if improving:
                    heapq.heappop(heap)  # its fresh entry was pushed when it changed
                else:
                    heapq.heapreplace(heap, (self._key(i), i, version[i]))
                continue
            if pool.fits(i, slots, memory_mb, live) and (allow is None or allow(i)):
                return i
            heapq.heappop(heap)  # too full for this shape for the rest of the pass
        if improving:
            pool.improving_sets.remove(self)
        return None

    def refresh(self, i: int) -> None:
        heapq.heappush(self._heap, (self._key(i), i, self._versions[i]))


CandidateSet = OrderedCandidates | RankedCandidates
