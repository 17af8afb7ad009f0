"""A minimal event-driven simulator of the same policies: the yardstick of `xce simulate`.

Deliberately independent of xce.core and xce.sched (it only reads `SwfJob`s): plain lists,
one heap of events, one function per policy. `xce simulate` must be within 5x of its time
(`python -m bench`, figure 8) and give the same waits (tests/sched/test_refsim_guard.py).

Conventions shared with `xce simulate` (xce/sched/sim/simulate.py): `hosts` identical hosts of
`slots` slots, hosts tried in name order; a job wider than a host is skipped; a job runs for
its run time cut at its requested time; at each instant jobs end, then jobs arrive, then one
pass runs if a job waits and a host has room. EASY reserves for the first job that fits
nowhere the earliest start by requested times (ties: the lower host, the smaller job ending
first), and later jobs start only where they do not delay it.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from xce.sched.sim.swf import SwfJob

INF = math.inf


class RefResult:
    def __init__(self, policy: str, starts: dict[int, float], seconds: float) -> None:
        self.policy, self.starts, self.seconds = policy, starts, seconds


def run_time(job: SwfJob) -> float:
    req = job.requested_time
    return float(req) if req is not None and job.run_time > req else job.run_time


def refsim(
    jobs: Sequence[SwfJob],
    hosts: int,
    slots: int,
    policy: str = "easy",
    half_life_s: float = 3600.0,
) -> RefResult:
    """Start time of every job (by trace number) under `policy`: fcfs (strict), first-fit,
    easy, or fairshare (by user, with EASY backfilling)."""
    began = time.perf_counter()
    free = [slots] * hosts
    total = [hosts * slots]
    # host -> {seq: (end estimate, procs)} of running jobs, for reservations
    running: list[dict[int, tuple[float, int]]] = [{} for _ in range(hosts)]
    starts: dict[int, float] = {}
    events: list[tuple[float, int, int, Any]] = []  # (time, 0 end / 1 arrival, seq, data)
    for seq, job in enumerate(jobs):
        if job.procs <= slots:
            events.append((job.submit, 1, seq, job))
    heapq.heapify(events)
    seq = len(jobs)
    queue: Any = deque() if policy == "fcfs" else []
    usage: dict[str, tuple[float, float]] = {}  # fairshare: user -> (core-s, as of)
    users_running: dict[str, list[tuple[int, float]]] = {}  # user -> [(procs, start)]

    def start(job: SwfJob, i: int, now: float) -> None:
        nonlocal seq
        free[i] -= job.procs
        total[0] -= job.procs
        starts[job.number] = now
        wall = INF if job.requested_time is None else now + job.requested_time
        running[i][seq] = (wall, job.procs)
        if policy == "fairshare":
            users_running.setdefault(job.user, []).append((job.procs, now))
        heapq.heappush(events, (now + run_time(job), 0, seq, (i, job)))
        seq += 1

    def first_host(procs: int) -> int:
        for i in range(hosts):
            if free[i] >= procs:
                return i
        return -1

    def reserve(procs: int, now: float) -> tuple[int, float, int]:
        best = (-1, INF, 0)
        for i in range(hosts):
            have = free[i]
            for end, got in sorted((max(now, e), p) for e, p in running[i].values()):
                if end == INF:
                    break
                have += got
                if have >= procs:
                    if end < best[1]:
                        best = (i, end, have - procs)
                    break
        return best

    def easy(order: Iterable[SwfJob], now: float) -> set[int]:
        taken: set[int] = set()
        res: tuple[int, float, int] | None = None
        extra = 0
        for job in order:
            if total[0] <= 0:
                break
            procs = job.procs
            if res is None:
                i = first_host(procs)
                if i < 0:
                    res = reserve(procs, now)
                    extra = res[2]
                    if res[0] < 0:
                        res = None  # no known start (jobs without a limit): no promise
                    continue
            else:
                if procs > total[0]:
                    continue
                req = job.requested_time
                short = req is not None and now + req <= res[1]
                i = -1
                for h in range(hosts):
                    if free[h] >= procs and (h != res[0] or short or procs <= extra):
                        i = h
                        break
                if i < 0:
                    continue
                if i == res[0] and not short:
                    extra -= procs
            start(job, i, now)
            taken.add(job.number)
        return taken

    def fair_order(now: float) -> Iterator[SwfJob]:
        """Users by shares / (1 + decayed core-hours + slots in use), re-ranked after each
        of their jobs is tried (a job just started counts at once)."""
        per_user: dict[str, deque[SwfJob]] = {}
        for job in queue:
            per_user.setdefault(job.user, deque()).append(job)
        hours: dict[str, float] = {}
        for user, (value, at) in usage.items():
            hours[user] = value * 0.5 ** ((now - at) / half_life_s)
        slots_of: dict[str, int] = {}
        for user, mine in users_running.items():
            for procs, began_at in mine:
                hours[user] = hours.get(user, 0.0) + procs * (now - began_at)
                slots_of[user] = slots_of.get(user, 0) + procs
        hours = {u: h / 3600.0 for u, h in hours.items()}
        heap = [
            (-1.0 / (1.0 + hours.get(u, 0.0) + slots_of.get(u, 0)), q[0].number, u)
            for u, q in per_user.items()
        ]
        heapq.heapify(heap)
        while heap:
            _, _, user = heapq.heappop(heap)
            q = per_user[user]
            before = total[0]
            yield q.popleft()
            slots_of[user] = slots_of.get(user, 0) + before - total[0]
            if q:
                heapq.heappush(
                    heap,
                    (
                        -1.0 / (1.0 + hours.get(user, 0.0) + slots_of.get(user, 0)),
                        q[0].number,
                        user,
                    ),
                )

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, key, data = heapq.heappop(events)
            if kind == 0:
                i, job = data
                free[i] += job.procs
                total[0] += job.procs
                del running[i][key]
                if policy == "fairshare":
                    users_running[job.user].remove((job.procs, starts[job.number]))
                    value, at = usage.get(job.user, (0.0, now))
                    value = value * 0.5 ** ((now - at) / half_life_s)
                    usage[job.user] = (value + job.procs * (now - starts[job.number]), now)
            else:
                queue.append(data)
        if not queue or total[0] <= 0:
            continue
        if policy == "fcfs":
            while queue and total[0] > 0:
                i = first_host(queue[0].procs)
                if i < 0:
                    break
                start(queue.popleft(), i, now)
        elif policy == "first-fit":
            taken = set()
            for job in queue:
                if total[0] <= 0:
                    break
                i = first_host(job.procs) if job.procs <= total[0] else -1
                if i >= 0:
                    start(job, i, now)
                    taken.add(job.number)
            if taken:
                queue = [j for j in queue if j.number not in taken]
        elif policy in ("easy", "fairshare"):
            taken = easy(fair_order(now) if policy == "fairshare" else queue, now)
            if taken:
                queue = [j for j in queue if j.number not in taken]
        else:
            raise ValueError(f"unknown policy {policy!r}")
    return RefResult(policy, starts, time.perf_counter() - began)
