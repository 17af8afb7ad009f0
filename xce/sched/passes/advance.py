"""Advance reservations in a scheduling pass (Slurm reservations, LSF `brsvadd`).

Promise: no job starts on a reserved host if, by its walltime (else its queue's default,
else its queue's maximum; none at all: it never ends), it would still be running once a
reservation it does not belong to has started there. A job belongs to a reservation only
by targeting it (`JobSpec.reservation`, `--reservation NAME`), and a job that targets one
starts only on its hosts while it is active.

A whole-host reservation (`slots` 0) keeps every other job off the host for the overlap; a
reservation of N slots leaves a non-member the host's free slots minus N (and minus N per
other reservation overlapping the job), counted against free slots *now*: conservative, as
the reservation's own jobs then count against what others may use, but never late.

Within a pass free slots only go down and the verdict for a host depends on the job's
walltime, reservation and slots (all part of the pass's job *shape*), so a host this
refuses for a shape stays refused for the rest of the pass, as the candidate sets assume
(xce/sched/passes/hostpool.py). The gate reads no clock: `now` is the pass's; reasons give times
as epoch seconds after `from`, `until` or `at`, which `xce job show` prints as local times
(xce/client/readable.py).

Expiry needs no event: a reservation whose `end` has passed holds nothing, and jobs that
target it wait with the reason "reservation NAME has ended" until they are killed or moved.
"""

from __future__ import annotations

from collections.abc import Iterable

from xce.core.model import JobSpec, QueueRecord, ReservationRecord
from xce.sched import reasons as why
from xce.sched.passes.hostpool import INFINITY, HostPool
from xce.sched.passes.reservation import Reservation
from xce.sched.plugins.base import ReservePlugin
from xce.sched.reasons import WaitReason


def effective_walltime(spec: JobSpec, queue: QueueRecord) -> int | None:
    """The walltime a job is judged by: its own, else the queue's default, else maximum."""
    if spec.walltime_s is not None:
        return spec.walltime_s
    if queue.default_walltime_s is not None:
        return queue.default_walltime_s
    return queue.max_walltime_s


class AdvanceGate:
    """The reservations of one pass, by host index of the pass's `HostPool`."""

    __slots__ = ("by_name", "now", "on_host", "pool", "refused")

    def __init__(
        self, reservations: Iterable[ReservationRecord], pool: HostPool, now: float
    ) -> None:
        self.now = now
        self.pool = pool
        self.by_name = {r.name: r for r in reservations}
        self.on_host: dict[int, list[ReservationRecord]] = {}
        for r in self.by_name.values():
            if r.end <= now:
                continue  # ended: holds nothing
            for host in r.hosts:
                i = pool.index.get(host)
                if i is not None:
                    self.on_host.setdefault(i, []).append(r)
        # The last (reservation, host index) that refused a host the job otherwise fits:
        # read by the pass to name the reservation in the job's reason.
        self.refused: tuple[ReservationRecord, int] | None = None

    def target_problem(self, spec: JobSpec) -> WaitReason | None:
        """Why a job that targets a reservation cannot start now (None: it may, on the
        reservation's hosts)."""
        r = self.by_name.get(spec.reservation)
        if r is None:
            return why.no_reservation(spec.reservation)
        if self.now < r.start:
            return why.reservation_pending(r.name, r.start)
        if self.now >= r.end:
            return why.reservation_ended(r.name)
        return None

    def allows(self, i: int, spec: JobSpec, walltime_s: int | None) -> bool:
        """Whether a job of `spec` (judged by `walltime_s`) may start on host `i` now, as far
        as reservations go (free slots and memory are checked by the caller first)."""
        target = spec.reservation
        if target:
            own = self.by_name.get(target)
            if own is None or self.pool.hosts[i].name not in own.hosts:
                return False
        held = self.on_host.get(i)
        if not held:
            return True
        now = self.now
        ends = INFINITY if walltime_s is None else now + walltime_s
        reserved = 0
        for r in held:
            if r.name == target or ends <= r.start or now >= r.end:
                continue
            if r.slots == 0:
                self.refused = (r, i)
                return False
            reserved += r.slots
            if self.pool.free_slots[i] - reserved < spec.slots:
                self.refused = (r, i)
                return False
        return True

    def clear_of(self, i: int, spec: JobSpec, walltime_s: int | None, start: float) -> float:
        """The earliest time from `start` at which a job of `spec` could run on host `i`
        for `walltime_s` without meeting a reservation it does not target (INFINITY: never,
        e.g. no walltime and a reservation ahead). Only windows matter here: resources are
        the caller's (they only grow after `start` in EASY's projection)."""
        held = [
            r
            for r in self.on_host.get(i, ())
            if r.name != spec.reservation
            and (r.slots == 0 or self.pool.hosts[i].slots - r.slots < spec.slots)
        ]
        moved = True
        while moved and start < INFINITY:
            moved = False
            ends = INFINITY if walltime_s is None else start + walltime_s
            for r in held:
                if start < r.end and ends > r.start:
                    start, moved = r.end, True
        return start

    def reserve(
        self, plugin: ReservePlugin, hosts: list[int], spec: JobSpec, walltime_s: int | None
    ) -> Reservation | None:
        """`plugin`'s reservation for a job that fits nowhere now, moved out of the windows
        of reservations it does not belong to: host by host, its earliest start by free
        resources is pushed past each window it would run into, the free slots and memory
        then recounted, and the earliest of those kept. So an EASY reservation is made for
        a time the job can really start, and backfill around it is judged against that."""
        if not hosts:
            return plugin.reserve(self.pool, hosts, spec, self.now)
        best: Reservation | None = None
        for i in hosts:
            made = plugin.reserve(self.pool, [i], spec, self.now)
            if made is None or made.host < 0:
                if made is not None:
                    return made  # not a reservation of one host (strict order)
                continue
            start = self.clear_of(i, spec, walltime_s, made.start)
            if start == INFINITY:
                continue
            if start != made.start:
                free_slots, free_mem = self.pool.free_slots[i], self.pool.free_mem[i]
                for end, slots, mem in self.pool.releases(i):
                    if end > start:
                        break
                    free_slots, free_mem = free_slots + slots, free_mem + mem
                made.start = start
                made.extra_slots = free_slots - spec.slots
                made.extra_mem = free_mem - spec.memory_mb
            if best is None or made.start < best.start:
                best = made
        return best

    def describe(self) -> WaitReason:
        """The reason for a job the last refusal kept from a host it fits."""
        assert self.refused is not None
        r, i = self.refused
        return why.reservation_holds(r.name, r.slots, self.pool.hosts[i].name, r.start, r.end)


def wake_times(reservations: Iterable[ReservationRecord], now: float) -> list[float]:
    """The future starts and ends of reservations: a pass then may start what it could not
    before (a targeting job at the start, anything at the end), with no event to wake it."""
    return sorted({t for r in reservations for t in (r.start, r.end) if t > now})
