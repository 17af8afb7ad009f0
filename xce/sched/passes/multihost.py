"""Placing a job on several hosts at once: all of its hosts now, or none.

A job spreads when its `-R` has `span[ptile=P]` (P slots per host, the last host may get
fewer) or `span[block=B]` (slots in multiples of B per host) and it is wider than one tile
or block, when it asks for whole hosts (`exclusive`), or, with no span at all, when it is
wider than every host the queue may use. With no span a job that fits on one host stays on
one host (the single-host path, as before); `span[hosts=1]` never spreads.

The hosts are tried in the order the job's `order[]` and the queue's score give them
(`key_function`, as for one host); `same[attr]` keeps every host in one group of equal
attribute values (groups tried in the order of their best host). Nothing is taken unless
every share fits, so there are no partial holds.

EASY backfill for such a job reserves a *set* of hosts (`HostSetReservation`): the
earliest time at which the layout fits, counting running jobs as ending at start +
walltime; a later job may use a reserved host only if it ends before that time or fits in
what that host has left over then, so it never delays the reserved start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from xce.core.allocation import host_memory_mb
from xce.core.model import JobSpec
from xce.sched.expr import ResourceRequirement, matches
from xce.sched.passes.hostpool import INFINITY, HostPool
from xce.sched.passes.reservation import Reservation
from xce.sched.snapshot import HostView


class ByHost(Protocol):
    """Free slots or memory by host index: the pass's lists, or a dict of some hosts."""

    def __getitem__(self, i: int, /) -> int: ...


class HostViews(Protocol):
    """What `groups_of` reads of a pool: its hosts by index."""

    @property
    def hosts(self) -> Sequence[HostView]: ...


Shares = list[tuple[int, int]]  # (host index, slots)


def spreads(spec: JobSpec, req: ResourceRequirement | None) -> bool:
    """Whether `spec` takes the multi-host path whatever the hosts (exclusive, or a span
    narrower than the job). A job without a span spreads only when no host is big enough,
    which the pass finds out on its own."""
    if spec.exclusive:
        return True
    span = req.span if req is not None else None
    if span is None or span.hosts is not None:
        return False
    tile = span.ptile or span.block or spec.slots
    return spec.slots > tile


def span_allows_spreading(req: ResourceRequirement | None) -> bool:
    """No span at all: the scheduler may spread a job no host can hold alone."""
    return req is None or req.span is None


@dataclass(slots=True)
class Layout:
    """How many slots a job may take on one host, from its span and `exclusive`."""

    slots: int
    ptile: int | None = None
    block: int | None = None
    exclusive: bool = False

    @classmethod
    def of(cls, spec: JobSpec, req: ResourceRequirement | None) -> Layout:
        span = req.span if req is not None else None
        return cls(
            spec.slots, span.ptile if span else None, span.block if span else None, spec.exclusive
        )

    def share(self, host_slots: int, free: int, remaining: int) -> int:
        """Slots of the job this host takes given `free` slots, 0 for none. An exclusive
        share holds the whole host (`host_slots`), of which the job uses `used(...)`."""
        if self.exclusive:
            if free < host_slots:
                return 0
            return host_slots
        want = remaining if self.ptile is None else min(self.ptile, remaining)
        if self.block is not None:
            take = min(free // self.block * self.block, remaining)
            return take if take >= self.block else 0
        if self.ptile is not None:
            return want if free >= want else 0
        return min(free, remaining)

    def least(self, host_slots: int) -> int:
        """The smallest share this layout ever puts on a host: a host with fewer free
        slots can take no part of the job for the rest of the pass."""
        if self.exclusive:
            return host_slots
        if self.block is not None:
            return self.block
        if self.ptile is not None:
            return min(self.ptile, self.slots % self.ptile or self.ptile)
        return 1

    def used(self, share: int, remaining: int) -> int:
        """How much of `remaining` a share of `share` slots covers."""
        if self.exclusive and self.ptile is not None:
            return min(self.ptile, remaining, share)
        return min(share, remaining)


def choose(
    layout: Layout,
    spec: JobSpec,
    ordered: Sequence[int],
    free_slots: ByHost,
    free_mem: ByHost,
    host_slots: Callable[[int], int],
    ok: Callable[[int, int, int], bool] | None = None,
    prune: bool = False,
) -> Shares | None:
    """Shares on `ordered` hosts (best first) that hold the whole job, or None. With
    `prune` (`ordered` a list kept for one job shape during a pass, where free resources
    only shrink), hosts met that can no longer take even the smallest share are removed
    from it, so the next job of the shape does not look at them again."""
    if layout.ptile is not None and not layout.exclusive and layout.slots % layout.ptile:
        return _choose_tiles(layout, spec, ordered, free_slots, free_mem, ok, prune)
    remaining = layout.slots
    out: Shares = []
    dead: list[int] = []
    at = -1
    for at, i in enumerate(ordered):  # `at`: how far the scan went
        whole = host_slots(i)
        take = layout.share(whole, free_slots[i], remaining)
        if take <= 0:
            if prune and free_slots[i] < layout.least(whole):
                dead.append(at)
            continue
        mem = host_memory_mb(spec, take)
        if free_mem[i] < mem or (ok is not None and not ok(i, take, mem)):
            continue
        out.append((i, take))
        remaining -= layout.used(take, remaining)
        if remaining <= 0:
            break
    if dead:
        assert isinstance(ordered, list)  # `prune` is only given a list (see `choose`)
        gone = set(dead)
        ordered[: at + 1] = [h for k, h in enumerate(ordered[: at + 1]) if k not in gone]
    return out if remaining <= 0 else None


def _choose_tiles(
    layout: Layout,
    spec: JobSpec,
    ordered: Sequence[int],
    free_slots: ByHost,
    free_mem: ByHost,
    ok: Callable[[int, int, int], bool] | None,
    prune: bool,
) -> Shares | None:
    """`choose` for `span[ptile=P]` whose slots leave a smaller last share: full tiles on
    the best hosts with P free, the rest on the best host with room for it (in rank
    order a host too small for a tile must not end the search for the tail)."""
    tile = layout.ptile
    assert tile is not None
    full, rest = divmod(layout.slots, tile)
    tiles: list[tuple[int, int]] = []  # (position in the scan, host)
    tail: tuple[int, int] | None = None
    dead: list[int] = []
    at = -1
    mem_tile, mem_rest = host_memory_mb(spec, tile), host_memory_mb(spec, rest)
    for at, i in enumerate(ordered):  # `at`: how far the scan went
        free = free_slots[i]
        if free < rest:
            if prune:
                dead.append(at)
            continue
        if (
            len(tiles) < full
            and free >= tile
            and free_mem[i] >= mem_tile
            and (ok is None or ok(i, tile, mem_tile))
        ):
            tiles.append((at, i))
        elif tail is None and free_mem[i] >= mem_rest and (ok is None or ok(i, rest, mem_rest)):
            tail = (at, i)
        if len(tiles) == full and tail is not None:
            break
    if dead:
        assert isinstance(ordered, list)  # `prune` is only given a list (see `choose`)
        gone = set(dead)
        ordered[: at + 1] = [h for k, h in enumerate(ordered[: at + 1]) if k not in gone]
    if len(tiles) < full or tail is None:
        return None
    picked = sorted([(k, i, tile) for k, i in tiles] + [(tail[0], tail[1], rest)])
    return [(i, take) for _, i, take in picked]  # in rank order: the best host first


def groups_of(
    pool: HostViews, hosts: Sequence[int], req: ResourceRequirement | None
) -> list[list[int]]:
    """`hosts` (already ranked) cut into `same[]` groups, each group in rank order, groups
    in the order of their best host; hosts lacking a `same` attribute are left out."""
    names = req.same if req is not None else ()
    if not names:
        return [hosts if isinstance(hosts, list) else list(hosts)]  # the same list: pruned
    grouped: dict[tuple[str | None, ...], list[int]] = {}
    for i in hosts:
        view = pool.hosts[i]
        values = tuple(dict(view.attributes).get(n) for n in names)
        if None in values:
            continue
        grouped.setdefault(values, []).append(i)
    return list(grouped.values())


@dataclass(slots=True)
class HostSetReservation(Reservation):
    """An EASY reservation of several hosts: {host index: (slots, memory) left over at
    `start` beyond the reserved job's share}."""

    extra: dict[int, list[int]] = field(default_factory=dict)

    def allows(
        self, i: int, slots: int, memory_mb: int, walltime_s: float | None, now: float
    ) -> bool:
        left = self.extra.get(i)
        if left is None:
            return True
        if walltime_s is not None and now + walltime_s <= self.start:
            return True
        return slots <= left[0] and memory_mb <= left[1]

    def took(
        self, i: int, slots: int, memory_mb: int, walltime_s: float | None, now: float
    ) -> None:
        left = self.extra.get(i)
        if left is not None and (walltime_s is None or now + walltime_s > self.start):
            left[0] -= slots
            left[1] -= memory_mb

    def describe(self) -> str:
        names = ",".join(self.host_name.split(",")[:4])
        more = "" if len(self.extra) <= 4 else f" and {len(self.extra) - 4} more"
        return f"hosts {names}{more} reserved from {self.start:.0f}"

    def to_plain(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "host": self.host_name, "start": self.start}


def reserve(
    pool: HostPool, layout: Layout, spec: JobSpec, groups: list[list[int]], now: float
) -> HostSetReservation | None:
    """The earliest time the job's layout fits on one of `groups` as running and placed
    jobs reach their walltimes, and the hosts it would take then."""
    hosts = sorted({i for g in groups for i in g})
    if not hosts:
        return None
    free_slots = {i: pool.free_slots[i] for i in hosts}
    free_mem = {i: pool.free_mem[i] for i in hosts}
    events = sorted(
        (end, i, s, m) for i in hosts for end, s, m in pool.releases(i) if end != INFINITY
    )
    views = pool.hosts

    def host_slots(i: int) -> int:
        return views[i].slots

    total = sum(max(0, v) for v in free_slots.values())
    # When each host last got slots back: the reservation takes the hosts that free last
    # before its start first, leaving hosts free now to backfill (as one big host would
    # leave its slots beyond the reserved job's: `--hosts N --slots 1` equals `1 x N`).
    last: dict[int, float] = {}
    at = 0
    times = [now] + [e[0] for e in events]
    seen = -1.0
    for t in times:
        if t == seen:
            continue
        seen = t
        while at < len(events) and events[at][0] <= t:
            _, i, s, m = events[at]
            free_slots[i] += s
            free_mem[i] += m
            total += s
            last[i] = events[at][0]
            at += 1
        if total < layout.slots:
            continue  # a necessary condition, cheap: the slots are not there at all yet
        for group in groups:
            group = sorted(group, key=lambda i: -last.get(i, now))
            shares = choose(layout, spec, group, free_slots, free_mem, host_slots)
            if shares is None:
                continue
            extra = {
                i: [free_slots[i] - s, free_mem[i] - host_memory_mb(spec, s)] for i, s in shares
            }
            first = shares[0][0]
            return HostSetReservation(
                "", first, ",".join(views[i].name for i, _ in shares), t, 0, 0, extra
            )
    return None


def needed_hosts(layout: Layout) -> int:
    """The fewest hosts the layout can use (for messages)."""
    tile = layout.ptile or layout.block
    return 1 if tile is None else math.ceil(layout.slots / tile)


def ptile_shortfall(ptile: int, slots: int, sizes: list[int]) -> str | None:
    """Why hosts of `sizes` slots cannot take `slots` in tiles of `ptile` (`ptile` on each
    host, the last the rest), or None when their sizes allow it (memory is what fails)."""
    full, rest = divmod(slots, ptile)
    largest = sorted(sizes, reverse=True)
    big = sum(1 for size in largest if size >= ptile)
    if not big:
        return (
            f"span[ptile={ptile}] puts {ptile} slots on each host and no host has "
            f"{ptile} (the largest has {largest[0]})"
        )
    # the `full` largest hosts take whole tiles, the next largest the rest
    if big >= full and (not rest or (len(largest) > full and largest[full] >= rest)):
        return None
    need = f"{full} host{'s' if full != 1 else ''} of at least {ptile} slots"
    if rest:
        need += f" and one more of at least {rest}"
    return (
        f"span[ptile={ptile}] spreads {slots} slots over {need}; it has {big} "
        f"host{'s' if big != 1 else ''} of {ptile} slots or more"
    )


def live_ok(pool: HostPool, req: ResourceRequirement | None) -> Callable[[int], bool] | None:
    """A check of `select[]` on free attributes (`slots`, `mem`) against this pass's
    placements, when the job's select reads them."""
    from xce.sched.passes.ranking import FREE_ATTRIBUTES, select_names

    if req is None or not (select_names(req.select) & FREE_ATTRIBUTES):
        return None
    node = req.select
    return lambda i: matches(node, pool.attributes(i))
