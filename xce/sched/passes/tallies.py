"""The scheduling pass's shared record: what every part of the pass reads and writes.

The plan so far (placements, reasons, reservations), the pass's one EASY reservation, the
specs known blocked, and the running tallies that limits and the order plugins read (jobs
and slots per user, group and queue, decayed usage, array tasks placed). One is made per
pass by `SchedulingPass` (xce/sched/passes/pipeline.py) and handed to each of its parts
(xce/sched/passes/hosts.py, spread.py, place.py), which keep references to its mutable
containers (they are never rebound) and read what is rebound (`reservation`) from it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from xce.core.model import JobSpec, QueueRecord
from xce.sched import reasons as why
from xce.sched.passes.reservation import Reservation
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import Snapshot
from xce.sched.types import Plan

# the tallies of a pass that counts nothing: one read-only empty mapping, not a dict made
# and freed per pass
_NOTHING_COUNTED: Any = MappingProxyType({})


class PassTallies:
    """The plan a pass builds and the counts it keeps while it places jobs."""

    # Slotted: one is made per pass, and a pass per event the controller applies and per
    # instant `xce simulate` replays
    __slots__ = (
        "blocked",
        "by_prediction",
        "group_slots",
        "limits",
        "now",
        "placed_per_array",
        "predict",
        "queue_running",
        "reservation",
        "result",
        "running_slots",
        "snapshot",
        "starved",
        "tally",
        "usage_hours",
        "user_running",
    )

    def __init__(self, snapshot: Snapshot, now: float, tally: bool, limits: bool) -> None:
        """`tally`: running jobs are counted (a queue limits them, or an order plugin reads
        usage); `limits`: jobs per queue and user are counted too (a queue limits them)."""
        self.snapshot = snapshot
        self.now = now
        self.result = Plan([], {}, [])  # (literals: cheaper than its default factories)
        # the pass's one reservation (EASY, or a host set for a multi-host job), once made
        self.reservation: Reservation | None = None
        # id(JobSpec) -> why jobs sharing that spec object cannot start in this pass
        self.blocked: dict[int, WaitReason] = {}
        self.placed_per_array: dict[int, int] | None = None  # (`placed_task`)
        # Run-time predictions (xce/sched/predict.py): seconds a pending job is expected to
        # run, in a pass where a queue predicts (None: none does); `by_prediction` once the
        # pass's reservation is timed by them (later jobs are then judged by theirs); the
        # ids an order found starving (their reservation is made by walltimes)
        self.predict: Callable[[JobSpec], float | None] | None = None
        self.by_prediction = False
        self.starved: set[str] | None = None
        self.tally, self.limits = tally, limits
        # what is not counted (no queue orders by usage, or none limits running jobs) is
        # one empty mapping that refuses writes
        self.queue_running: dict[str, int] = _NOTHING_COUNTED
        self.user_running: dict[tuple[str, str], int] = _NOTHING_COUNTED
        if limits:
            self.queue_running, self.user_running = {}, {}
        self.running_slots: dict[str, int]
        self.group_slots: dict[str, int]
        self.usage_hours: dict[str, float]
        if tally:
            self.running_slots, self.group_slots = {}, {}
            self.count_running()  # (and usage_hours)
        else:
            self.running_slots = self.group_slots = self.usage_hours = _NOTHING_COUNTED

    def reserving(self, key: str, policy: Any) -> bool:
        """About to make the reservation for `key` under `policy` (a QueuePolicy): whether
        it is timed by predictions (the caller has the pool answer by expected ends while
        it reserves, `HostPool.expecting`): when the policy's reservation predicts and
        `key` is not starving."""
        return (
            self.predict is not None
            and policy.reserve_predicts
            and not (self.starved and key in self.starved)
        )

    def judged(self, spec: JobSpec) -> float | None:
        """How long `spec` counts as running when judged against the reservation: its
        prediction when the reservation is timed by predictions, else its walltime."""
        if self.by_prediction:
            predict = self.predict
            assert predict is not None  # (set whenever a reservation is by prediction)
            return predict(spec)
        return spec.walltime_s

    def expected(self, spec: JobSpec) -> float | None:
        """How long a job placed now is expected to hold its slots, for a reservation made
        later in the pass (its prediction in a pass that predicts; else its walltime)."""
        predict = self.predict
        return spec.walltime_s if predict is None else predict(spec)

    def count(self, user: str, queue: str, slots: int, jobs: int = 1) -> None:
        if not self.tally:
            return
        running = self.running_slots
        running[user] = running.get(user, 0) + slots
        group = self.snapshot.groups.get(user, "default") if self.snapshot.groups else "default"
        self.group_slots[group] = self.group_slots.get(group, 0) + slots
        if self.limits:
            self.queue_running[queue] = self.queue_running.get(queue, 0) + jobs
            self.user_running[queue, user] = self.user_running.get((queue, user), 0) + jobs

    def count_running(self) -> None:
        """`count` for every running job of the snapshot, and `usage_hours` (the decayed
        use of finished jobs plus the running jobs' use so far): the start of a pass that
        tallies, a cost per running job on every pass, so `count`'s steps are inline
        here (a call per running job was most of it), the slots per group are summed from
        the slots per user, and jobs per queue and user are counted only where a queue
        limits them."""
        snapshot, now = self.snapshot, self.now
        running, group_slots = self.running_slots, self.group_slots
        seconds = dict(snapshot.usage)
        for job in snapshot.running:
            user, slots = job.user, job.slots
            running[user] = running.get(user, 0) + slots
            elapsed = now - job.start_time
            seconds[user] = seconds.get(user, 0.0) + slots * (elapsed if elapsed > 0.0 else 0.0)
        groups = snapshot.groups
        for user, slots in running.items():
            group = groups.get(user, "default") if groups else "default"
            group_slots[group] = group_slots.get(group, 0) + slots
        if self.limits:
            queue_running, user_running = self.queue_running, self.user_running
            for job in snapshot.running:
                if not job.part:  # a job's other hosts' parts count its slots only
                    queue, user = job.queue, job.user
                    queue_running[queue] = queue_running.get(queue, 0) + 1
                    user_running[queue, user] = user_running.get((queue, user), 0) + 1
        self.usage_hours = {user: s / 3600.0 for user, s in seconds.items()}

    def limit(self, queue: QueueRecord, user: str) -> WaitReason | None:
        """Why `queue`'s limits on running jobs hold `user`'s next job back, if they do."""
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

    def placed_task(self, array: int) -> None:
        """One more task of `array` placed in this pass (its concurrency limit counts it)."""
        placed = self.placed_per_array
        if placed is None:
            placed = self.placed_per_array = {}
        placed[array] = placed.get(array, 0) + 1

    def room(self, number: int) -> int | None:
        """How many more tasks of array `number` may start, or None when it has no limit."""
        limit, active = self.snapshot.array_limits[number]
        if limit is None:
            return None
        placed = self.placed_per_array
        return limit - active - (placed.get(number, 0) if placed is not None else 0)
