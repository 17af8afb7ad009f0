"""The `predictive` policy: reservations and backfill on predictions, shortest first, and
the starvation guard (a job waiting past its bound gets a reservation nothing delays)."""

from __future__ import annotations

import pytest

from xce.config.loader import parse_config
from xce.config.scheduler import PredictiveSettings
from xce.core.deps import DepStatus
from xce.core.errors import ConfigError
from xce.core.model import JobSpec, QueueRecord
from xce.sched.passes.pipeline import plan
from xce.sched.plugins import builtin
from xce.sched.plugins.base import OrderContext
from xce.sched.plugins.short_first import (
    UNKNOWN_S,
    ShortFirst,
    guard_bound,
    ordered_run,
    queue_bound,
)
from xce.sched.predict import RuntimeHistory
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfJob
from xce.sched.snapshot import HostView, PendingJob, RunningJob, Snapshot

NOW = 10.0


def _short_first(
    jobs: list[PendingJob],
    now: float,
    settings: PredictiveSettings | None = None,
    history: RuntimeHistory | None = None,
) -> tuple[list[str], set[str]]:
    """The `short-first` order of `jobs` at `now` (predicted by `history` when given), and
    the jobs it named starving."""
    queue = QueueRecord("normal", plugins=("predictive",))
    snapshot = Snapshot(
        (),
        {"normal": queue},
        tuple(jobs),
        (),
        {},
        predictions=history,
        predictive=settings or PredictiveSettings(),
    )
    starved: set[str] = set()
    predict = history.predict if history is not None else None
    ctx = OrderContext(now, queue, {}, {}, snapshot=snapshot, predict=predict, starved=starved)
    return [item.job_id for item in ShortFirst().order(jobs, ctx)], starved


def _snapshot(plugins: tuple[str, ...], history: RuntimeHistory) -> Snapshot:
    """One host of 2 slots, one running (alice's, walltime 1000 s, predicted 100 s); pending:
    carol's 2-slot job (blocked), then bob's 1-slot job asking 2000 s, predicted 50 s."""
    running = RunningJob("r", "alice", "normal", "h", 1, 0, 0.0, 1000)
    history.started("r", JobSpec(user="alice", queue="normal", command="x", walltime_s=1000))
    head = JobSpec(user="carol", queue="normal", command="x", slots=2, walltime_s=600)
    small = JobSpec(user="bob", queue="normal", command="x", slots=1, walltime_s=2000)
    jobs = (
        PendingJob("1", 1, None, head, DepStatus.SATISFIED, 0.0),
        PendingJob("2", 2, None, small, DepStatus.SATISFIED, 1.0),
    )
    return Snapshot(
        (HostView("h", 2, 1000, 1, 1000, (), True),),
        {"normal": QueueRecord("normal", plugins=plugins)},
        jobs,
        (),
        {},
        (running,),
        predictions=history,
    )


def _history() -> RuntimeHistory:
    history = RuntimeHistory()
    for user, run in (("alice", 100.0), ("alice", 100.0), ("bob", 50.0), ("bob", 50.0)):
        history.ended(user, "", run)
    return history


def test_easy_keeps_a_long_request_out_of_the_reserved_hole() -> None:
    result = plan(_snapshot(("backfill",), _history()), NOW)
    assert result.placements == []
    assert result.reservations[0]["start"] == 1000.0  # the running job's walltime


def test_predictive_reserves_and_backfills_on_predictions() -> None:
    result = plan(_snapshot(("fcfs", "predictive"), _history()), NOW)
    assert [p.job_id for p in result.placements] == ["2"]  # ends by 60 s, predicted
    assert result.reservations[0]["start"] == 100.0  # the running job's prediction


def test_a_running_job_that_outlives_its_prediction_moves_the_reservation() -> None:
    snapshot = _snapshot(("fcfs", "predictive"), _history())
    later = plan(snapshot, 100.0)  # predicted 100 s, still running: + 1 minute
    assert later.reservations[0]["start"] == 160.0


def test_the_default_order_of_predictive_is_short_first() -> None:
    policy = builtin().policy_for(("predictive",))
    assert policy.order.name == "short-first"
    assert policy.predicts and policy.reserve_predicts and policy.shortest_first


def _starvation_trace(gap: int = 30, wide_at: float = 100.0) -> list[SwfJob]:
    """A stream of 1-slot jobs of 100 s (asking 200 s) arriving every `gap` seconds for
    30,000 s, which never leaves 4 slots free at once, and a 4-slot job of 1000 s arriving
    at `wide_at`, once the stream runs: shortest first, the wide job would wait until the
    stream dries up."""
    jobs: list[SwfJob] = []
    for k in range(30000 // gap):
        at = float(k * gap)
        if at >= wide_at and len(jobs) == k:  # the wide job, once, in submit order
            jobs.append(SwfJob(len(jobs) + 1, wide_at, 1000.0, 4, 1000, "u1", "g1"))
        jobs.append(SwfJob(len(jobs) + 1, at, 100.0, 1, 200, "u2", "g1"))
    return jobs


def _wide_start(guard_factor: float) -> float:
    result = simulate(
        _starvation_trace(),
        1,
        4,
        "predictive",
        predictive=PredictiveSettings(guard_factor=guard_factor, short_weight=100.0),
    )
    (wide,) = [o for o in result.outcomes if o.job.procs == 4]
    assert wide.start is not None
    return wide.start - wide.job.submit


def test_the_guard_starts_a_starving_job_within_its_bound() -> None:
    # bound 2 x 1000 s: a pass runs the instant it is reached (the simulator wakes for
    # it) and reserves by walltimes, so it starts once the jobs running then reach their
    # requests (200 s at most)
    assert 2 * 1000 <= _wide_start(2.0) <= 2 * 1000 + 200


def test_easy_starts_the_wide_job_soon() -> None:
    """The trace is fair to EASY: its reservation alone lets the wide job in quickly."""
    result = simulate(_starvation_trace(), 1, 4, "easy")
    (wide,) = [o for o in result.outcomes if o.job.procs == 4]
    assert wide.start is not None and wide.start - wide.job.submit <= 200 + 30


def test_without_the_guard_the_wide_job_starves() -> None:
    # shortest first with no bound: it waits for the end of the stream
    assert _wide_start(1000.0) > 20000  # what the guard is for


def test_short_first_orders_short_jobs_first_and_starving_jobs_before_all() -> None:
    def job(n: int, wall: int, submitted: float) -> PendingJob:
        spec = JobSpec(user="u", queue="normal", command="x", walltime_s=wall)
        return PendingJob(str(n), n, None, spec, DepStatus.SATISFIED, submitted)

    jobs = [job(1, 1000, 0.0), job(2, 100, 50.0), job(3, 10, 60.0)]
    settings = PredictiveSettings(guard_factor=5.0, short_weight=1.0)

    def order(now: float) -> tuple[list[str], set[str]]:
        return _short_first(jobs, now, settings)

    assert order(100.0) == (["3", "2", "1"], set())  # keys 70, 150, 1000
    # job 1 reaches 5 x 1000 s of waiting at 5000: first, and named starving
    assert ShortFirst.wakes_at(0.0, 1000, settings) == 5000.0
    # jobs 3 and 2 starve at 110 and 550: the oldest (2) first, job 3 by its key
    assert order(4999.0) == (["2", "3", "1"], {"2", "3"})
    # all three starving: only the oldest moves to the front, the others keep their keys'
    # order (3 before 2), so one job at a time is protected, not the queue made FCFS
    assert order(5000.0) == (["1", "3", "2"], {"1", "2", "3"})


def test_order_trust_keeps_a_job_asking_much_from_passing_on_a_short_history() -> None:
    # wide: waiting since 0, predicted and asking 5,260 s; whole: asking 54,000 s but its
    # user's last runs took 10 s, submitted at 3,000 (the LLNL-Atlas case that sets the
    # maximum wait: "whole" ran 6.8 h once it had passed)
    history = RuntimeHistory()
    for run in (9.0, 11.0):
        history.ended("u7", "", run)
    wide = JobSpec(user="u44", queue="normal", command="x", slots=2008, walltime_s=5260)
    whole = JobSpec(user="u7", queue="normal", command="x", slots=8192, walltime_s=54000)
    jobs = [
        PendingJob("1", 1, None, wide, DepStatus.SATISFIED, 0.0),
        PendingJob("2", 2, None, whole, DepStatus.SATISFIED, 3000.0),
    ]

    def order(settings: PredictiveSettings) -> list[str]:
        return _short_first(jobs, 4000.0, settings, history)[0]

    # trusted fully: keys 0 + 100 x 5,260 against 3,000 + 100 x 10: the 10-s history wins
    assert order(PredictiveSettings(short_weight=100.0, order_trust=None)) == ["2", "1"]
    # the defaults trust it to a third of the request: 3,000 + 100 x 18,000 goes behind
    assert order(PredictiveSettings()) == ["1", "2"]
    # trusted to a quarter of the request: 3,000 + 100 x 13,500 goes behind
    assert order(PredictiveSettings(short_weight=100.0, order_trust=4.0)) == ["1", "2"]
    # a prediction above the floor is read as it is: wide's key is unchanged by the rule
    assert ordered_run(5260.0, 5260, PredictiveSettings(order_trust=4.0)) == 5260.0
    assert ordered_run(None, None, PredictiveSettings(order_trust=4.0)) == UNKNOWN_S


def test_the_default_guard_protects_a_long_request_after_three_days() -> None:
    """The default cap (`guard_max_s`, 72 h) bounds the guard of a job asking a day, whose
    own bound is 5 x 24 h: shorter jobs pass such a job for days before it would reach
    that. A job asking an hour keeps its own bound, 5 h."""
    defaults = PredictiveSettings()
    assert guard_bound(86400, defaults) == 259200.0
    assert guard_bound(3600, defaults) == 18000.0
    assert guard_bound(None, defaults) == 259200.0  # no walltime: starving at the cap
    assert ShortFirst.wakes_at(0.0, 86400, defaults) == 259200.0
    history = RuntimeHistory()
    day = JobSpec(user="u1", queue="normal", command="x", slots=4, walltime_s=86400)
    hour = JobSpec(user="u2", queue="normal", command="x", slots=4, walltime_s=3600)
    jobs = [
        PendingJob("1", 1, None, day, DepStatus.SATISFIED, 0.0),
        PendingJob("2", 2, None, hour, DepStatus.SATISFIED, 250000.0),
    ]

    def order(now: float) -> tuple[list[str], set[str]]:
        return _short_first(jobs, now, history=history)

    # before 72 h the hour job goes first (250,000 + 100 x 3,600 < 100 x 86,400)
    assert order(259199.0) == (["2", "1"], set())
    # at 72 h of waiting the day job is starving, and first
    assert order(259200.0) == (["1", "2"], {"1"})


def test_a_job_waiting_far_past_the_queues_average_wait_is_starving() -> None:
    """The CEA-Curie case: a job asking a day (its own bound: 72 h) waits while the jobs
    that start have waited 10 minutes on average. At 200 x that, 33.3 h, it is starving
    and goes first, though an hour job submitted later has the lower key."""
    history = RuntimeHistory()
    for wait in (300.0, 900.0):  # the last jobs to start waited 10 min on average
        history.waited(wait)
    day = JobSpec(user="u1", queue="normal", command="x", slots=4, walltime_s=86400)
    hour = JobSpec(user="u2", queue="normal", command="x", slots=4, walltime_s=3600)
    jobs = [
        PendingJob("1", 1, None, day, DepStatus.SATISFIED, 0.0),
        PendingJob("2", 2, None, hour, DepStatus.SATISFIED, 110000.0),
    ]

    def order(now: float, settings: PredictiveSettings) -> tuple[list[str], set[str]]:
        return _short_first(jobs, now, settings, history)

    defaults = PredictiveSettings()
    assert queue_bound(history.mean_wait(), defaults) == 120000.0
    assert order(119999.0, defaults) == (["2", "1"], set())
    assert order(120000.0, defaults) == (["1", "2"], {"1"})
    # the bound is the job's own alone without `wait_factor`
    assert order(120000.0, PredictiveSettings(wait_factor=None)) == (["2", "1"], set())
    # the simulator wakes for it while the average holds
    assert ShortFirst.queue_wakes_at(0.0, history.mean_wait(), defaults) == 120000.0


def test_the_queue_bound_has_a_floor_and_needs_history() -> None:
    """Where jobs start at once (an average of seconds) the bound is `wait_min_s`, not a
    multiple of nearly nothing that would make every waiting job starving; with no start
    yet there is no bound."""
    defaults = PredictiveSettings()
    assert queue_bound(5.0, defaults) == 86400.0
    assert queue_bound(0.0, PredictiveSettings(wait_min_s=60.0)) == 60.0
    assert queue_bound(None, defaults) == float("inf")
    assert ShortFirst.queue_wakes_at(0.0, None, defaults) is None


def test_the_predictive_settings_and_a_predictive_queue_from_the_config() -> None:
    config = parse_config(
        {
            "queue": [{"name": "normal", "plugins": ["predictive"]}],
            "scheduler": {
                "predictive": {"guard_factor": 3, "guard_max_s": 86400, "order_trust": 4}
            },
        }
    )
    settings = config.controller.scheduler.predictive
    assert (settings.guard_factor, settings.guard_max_s, settings.short_weight) == (
        3.0,
        86400.0,
        100.0,
    )
    assert settings.order_trust == 4.0
    assert config.controller.queues[0].plugins == ("predictive",)


def test_a_bad_predictive_key_is_named() -> None:
    with pytest.raises(ConfigError, match="guard_factor must be above 0"):
        parse_config({"scheduler": {"predictive": {"guard_factor": 0}}})
    with pytest.raises(ConfigError, match="order_trust must be above 0"):
        parse_config({"scheduler": {"predictive": {"order_trust": 0}}})
    with pytest.raises(ConfigError, match=r"scheduler\.predictive\.guard"):
        parse_config({"scheduler": {"predictive": {"guard": 1}}})


def _reference_order(
    jobs: list[PendingJob], now: float, settings: PredictiveSettings, history: RuntimeHistory
) -> tuple[list[str], set[str]]:
    """The short-first rule written plainly, job by job: key = submit time + short_weight x
    the ordered run time; a job that has waited its own bound or the queue's is starving;
    the oldest starving job first (then the first in the queue), the rest by key, equal keys
    in the queue's order."""
    mean = history.mean_wait()
    aged = now - queue_bound(mean, settings)
    starving, keyed = [], []
    for pos, job in enumerate(jobs):
        spec = job.spec
        bound = guard_bound(spec.walltime_s, settings)
        if (bound is not None and job.submit_time + bound <= now) or job.submit_time <= aged:
            starving.append((job.submit_time, pos, job))
        run = ordered_run(history.predict(spec), spec.walltime_s, settings)
        keyed.append((job.submit_time + settings.short_weight * run, pos, job))
    keyed.sort(key=lambda k: k[:2])
    order = [job.job_id for _, _, job in keyed]
    if starving:
        oldest = min(starving, key=lambda s: s[:2])[2].job_id
        order.remove(oldest)
        order.insert(0, oldest)
    return order, {job.job_id for _, _, job in starving}


@pytest.mark.parametrize("seed", range(12))
def test_the_short_first_order_is_its_rule_job_by_job(seed: int) -> None:
    """The order is made by `map` and `sorted` over the queue, asked once per group of specs
    alike: the same jobs in the same order as the rule applied to each job, with specs
    shared or each job its own, equal keys, jobs without a walltime, starving jobs."""
    import random

    rng = random.Random(seed)
    history = RuntimeHistory()
    users = ["u0", "u1", "u2", "u3"]
    for user in users[:3]:
        for _ in range(2):
            history.ended(user, rng.choice(("", "big")), float(rng.choice((30, 300, 3000))))
    for _ in range(rng.randrange(1, 20)):
        history.waited(float(rng.choice((1, 10, 100))))
    shapes = [
        JobSpec(
            user=rng.choice(users),
            queue="normal",
            name=rng.choice(("", "big")),
            command="x",
            walltime_s=rng.choice((None, 60, 600, 6000)),
        )
        for _ in range(6)
    ]
    jobs = []
    for n in range(1, 200):
        spec = rng.choice(shapes)
        if seed % 2:  # each job its own spec object (submitted one by one)
            spec = JobSpec(**{f: getattr(spec, f) for f in spec.__dataclass_fields__})
        submitted = float(rng.choice((0, 10, 20, 30)) + n // 50)  # equal times: equal keys
        jobs.append(PendingJob(str(n), n, None, spec, DepStatus.SATISFIED, submitted))
    settings = PredictiveSettings(
        guard_factor=rng.choice((1.0, 5.0)),
        guard_min_s=0.0,
        guard_max_s=rng.choice((None, 500.0)),
        short_weight=rng.choice((0.0, 1.0, 10.0)),
        wait_min_s=rng.choice((0.0, 100.0)),
    )
    for now in (40.0, 400.0, 4000.0, 40000.0):
        assert _short_first(jobs, now, settings, history) == _reference_order(
            jobs, now, settings, history
        )


def test_backfill_goes_shortest_first_after_the_queues_first_job() -> None:
    """A higher queue holds the reservation before the predictive queue is tried: that
    queue's first job is tried first all the same, then its others shortest predicted
    first (EASY++'s backfill), not in the order's order."""
    history = RuntimeHistory()
    for user, run in (("la", 200.0), ("lb", 50.0), ("lc", 20.0)):
        history.ended(user, "", run)
        history.ended(user, "", run)
    busy = RunningJob("r", "x", "high", "h1", 4, 0, 0.0, 1000)

    def job(n: int, user: str, queue: str, slots: int) -> PendingJob:
        spec = JobSpec(user=user, queue=queue, command="x", slots=slots, walltime_s=1000)
        return PendingJob(str(n), n, None, spec, DepStatus.SATISFIED, float(n))

    snapshot = Snapshot(
        (HostView("h1", 4, 1000, 0, 1000, (), True), HostView("h2", 2, 1000, 2, 1000, (), True)),
        {
            "high": QueueRecord("high", priority=10, plugins=("backfill",)),
            "low": QueueRecord("low", plugins=("predictive",)),
        },
        # by key (every request 1000 s, trusted down to 333 s): 2, 3, 4; predicted 200, 50, 20
        (
            job(1, "x", "high", 4),
            job(2, "la", "low", 1),
            job(3, "lb", "low", 1),
            job(4, "lc", "low", 1),
        ),
        (),
        {},
        (busy,),
        predictions=history,
    )
    for explain in (True, False):
        result = plan(snapshot, 100.0, explain)
        assert [r["job_id"] for r in result.reservations] == ["1"]
        assert sorted(p.job_id for p in result.placements) == ["2", "4"]
