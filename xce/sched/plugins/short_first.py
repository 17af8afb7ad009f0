"""Order `short-first`: short jobs first, waiting jobs catch up, starving jobs go first.

First come, first served lets one long job hold up hundreds of short ones, and bounded
slowdown (what users feel) punishes exactly that. This order ranks a queue's jobs by

    submit time + short_weight x predicted run time       (lowest first)

so a job predicted to run an hour longer than another goes behind it unless it has waited
`short_weight` hours longer: short jobs first, with aging that never stops (the key does not
change while a job waits, so the order is stable from pass to pass). Predictions come from
the pass (xce/sched/predict.py); a job with none (no walltime, no history) counts as
`UNKNOWN_S` long. With `order_trust` set (3 by default), a prediction counts as no less
than the request divided by it (`ordered_run`): a job whose users' last runs were short but
that asks for the machine for hours cannot pass every waiting job on that history alone,
since when the history is wrong the job holds its slots up to its request and each job it
passed waits that long (the maximum wait: docs/performance.md, LLNL-Atlas).

Starvation guard: a job that has waited `guard_factor` times its requested time
(`guard_max_s` at most; a job without a walltime only by `guard_max_s`) is starving and named
in `OrderContext.starved`: the pass gives a starving job's reservation timed and judged by
walltimes, which nothing placed after it can delay. The oldest starving job goes before all
the others; the other starving jobs keep their place in the order (their key has aged with
them) until each is the oldest in turn. One protected job at a time is EASY's guarantee
(its head's reservation); moving every starving job to the front instead put all of them
ahead of every short job, though only one can hold the protected reservation (under
overload, on traces with exact requests, 12-45 % of the jobs start only after their bound).

A job's own bound says nothing of the queue: a job asking a day may wait 5 days (3, the
cap) before it is protected, while under EASY no job on the same trace waits 2 (CEA-Curie:
docs/performance.md). So a job is also starving once it has waited `wait_factor` times the
average wait of the last jobs to start (`RuntimeHistory.mean_wait`, xce/sched/predict.py),
`wait_min_s` at least (`queue_bound`): where the queue makes jobs wait minutes a job
waiting days is starving, and where it makes them wait hours (under overload) that bound
lies beyond the job's own and changes nothing. The average is the history's, a function of
the jobs that started (rebuilt from the state on a restart), so the live pass and the
simulator read the same figure.

Settings:
`[scheduler.predictive]` (xce/config/scheduler.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from functools import partial
from itertools import chain, compress
from operator import add, attrgetter, ge, itemgetter
from typing import ClassVar

from xce.config.scheduler import PredictiveSettings
from xce.core.model import JobSpec
from xce.sched.plugins.base import Item, OrderContext
from xce.sched.predict import per_alike
from xce.sched.snapshot import PendingJob

INFINITY = float("inf")
UNKNOWN_S = 360000.0  # a job predicted nothing (no walltime, no history): 100 hours
_DEFAULT = PredictiveSettings()
_SPEC = attrgetter("spec")
_SUBMITTED = attrgetter("submit_time")
_BOUND = itemgetter(0)


def guard_bound(walltime_s: int | None, settings: PredictiveSettings) -> float | None:
    """How long a job of this request may wait before it is starving (None: never)."""
    cap = settings.guard_max_s
    if walltime_s is None:
        return cap
    bound = max(settings.guard_factor * walltime_s, settings.guard_min_s)
    return bound if cap is None or bound < cap else cap


def ordered_run(
    expected: float | None, walltime_s: int | None, settings: PredictiveSettings
) -> float:
    """The run time the order ranks a job by: its prediction `expected` (`UNKNOWN_S` when
    none), raised to its request over `order_trust` when that is set and the job has one."""
    run = UNKNOWN_S if expected is None else expected
    trust = settings.order_trust
    if trust is not None and walltime_s is not None:
        floor = walltime_s / trust
        if run < floor:
            return floor
    return run


def queue_bound(mean_wait: float | None, settings: PredictiveSettings) -> float:
    """How long any job may wait before it is starving, by the queue's recent waits
    (`mean_wait`: the average wait of the last jobs to start; None: none has started):
    `wait_factor` times it, `wait_min_s` at least; infinity (never) when `wait_factor` is
    unset or nothing has started."""
    factor = settings.wait_factor
    if factor is None or mean_wait is None:
        return INFINITY
    bound = factor * mean_wait
    return bound if bound > settings.wait_min_s else settings.wait_min_s


class ShortFirst:
    name: ClassVar[str] = "short-first"
    kind: ClassVar[str] = "order"
    submission_order: ClassVar[bool] = False
    reads_usage: ClassVar[bool] = False
    predicts: ClassVar[bool] = True

    @staticmethod
    def wakes_at(
        submit_time: float, walltime_s: int | None, settings: PredictiveSettings
    ) -> float | None:
        """When a job submitted at `submit_time` starts starving (None: never): the order
        changes then with no event, so the simulator runs a pass at that instant, as the
        controller's pass every `schedule_interval_s` sees it (xce/sched/sim/simulate.py)."""
        bound = guard_bound(walltime_s, settings)
        return None if bound is None else submit_time + bound

    @staticmethod
    def queue_wakes_at(
        submit_time: float, mean_wait: float | None, settings: PredictiveSettings
    ) -> float | None:
        """When a job submitted at `submit_time` starts starving by the queue's waits
        (`queue_bound`) while `mean_wait` holds (it changes only when a job starts): the
        simulator runs a pass then for the oldest waiting job (xce/sched/sim/simulate.py)."""
        bound = queue_bound(mean_wait, settings)
        return None if bound == INFINITY else submit_time + bound

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        """The queue's jobs by key, the oldest starving one first.

        A pass orders every waiting job of the queue (100,000 of them), so the work per job
        is done by `map` and `sorted` over lists, not by a loop of Python, and what is asked
        of a job's spec (its guard bound, its weighted prediction) is asked once per group of
        jobs alike (`per_alike`, xce/sched/predict.py). The order is made when this is
        called (it fills `ctx.starved` then), and handed on as an iterator."""
        snapshot = ctx.snapshot
        settings = snapshot.predictive if snapshot is not None else _DEFAULT
        predict = ctx.predict
        now, weight = ctx.now, settings.short_weight
        # starving by the queue's waits: submitted at or before `aged` (no history: never)
        history = snapshot.predictions if snapshot is not None else None
        aged = now - queue_bound(
            history.mean_wait() if history is not None and predict is not None else None,
            settings,
        )
        jobs = items if type(items) is list else list(items)
        if not jobs:
            return iter(jobs)
        specs = list(map(_SPEC, jobs))
        ids = list(map(id, specs))

        def judge(spec: JobSpec) -> tuple[float, float]:
            """(guard bound, weighted run time) of a job of `spec`."""
            expected = predict(spec) if predict is not None else spec.walltime_s
            bound = guard_bound(spec.walltime_s, settings)
            return (
                INFINITY if bound is None else bound,
                weight * ordered_run(expected, spec.walltime_s, settings),
            )

        judged = per_alike(dict(zip(ids, specs, strict=True)), judge)
        weighted = {key: answer[1] for key, answer in judged.items()}
        times = list(map(_SUBMITTED, jobs))
        keys = list(map(add, times, map(weighted.__getitem__, ids)))
        # lowest key first; equal keys in the queue's order (a stable sort of positions)
        ranked = sorted(range(len(jobs)), key=keys.__getitem__)
        # Starving: has waited its own bound, or the queue's. Most often no job is, which
        # the earliest submission tells with the shortest bound (a rounded sum never falls
        # as its terms grow, so no later job or longer bound can reach `now` either).
        first = min(times)
        if first + min(map(_BOUND, judged.values())) > now and first > aged:
            return map(jobs.__getitem__, ranked)
        positions = range(len(jobs))
        hungry = set(
            compress(
                positions,
                map(partial(ge, now), map(add, times, map(_BOUND, map(judged.__getitem__, ids)))),
            )
        )
        hungry.update(compress(positions, map(partial(ge, aged), times)))
        if not hungry:
            return map(jobs.__getitem__, ranked)
        starved = ctx.starved
        if starved is not None:
            for pos in hungry:
                item = jobs[pos]
                starved.add(item.job_id if type(item) is PendingJob else str(item.number))
        # the oldest starving job (earliest submitted, then first in the queue's order) goes
        # ahead of all; the others keep their place by their key
        oldest = min(hungry, key=lambda pos: (times[pos], pos))
        ranked.remove(oldest)
        return chain((jobs[oldest],), map(jobs.__getitem__, ranked))
