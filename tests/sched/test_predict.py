"""Run-time predictions (xce/sched/predict.py): sequences of a user's jobs give EASY++'s
predictions, a job that outlives its prediction gets the next step of Tsafrir et al.'s
ladder, and the controller's history is a function of its state (a restarted service has
the same predictions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.accounting.feed import AccountingFeed
from xce.config.settings import ControllerSettings
from xce.controller.prediction_records import rebuild_predictions
from xce.controller.requests import FinishReport, SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState
from xce.sched.predict import LADDER_S, WAIT_WINDOW, RuntimeHistory, extended
from xce.store.files import FileStore


def spec(user: str = "alice", walltime: int | None = 3600, name: str = "") -> JobSpec:
    return JobSpec(user=user, queue="normal", command="x", name=name, walltime_s=walltime)


def test_a_user_without_history_gets_the_request() -> None:
    history = RuntimeHistory()
    assert history.predict(spec(walltime=3600)) == 3600.0
    assert history.predict(spec(walltime=None)) is None


@pytest.mark.parametrize(
    ("runs", "walltime", "expected"),
    [
        ((100.0,), 3600, 100.0),  # one job: its run time
        ((100.0, 300.0), 3600, 200.0),  # two: their mean
        ((100.0, 300.0, 500.0), 3600, 400.0),  # the last two only
        ((5000.0, 7000.0), 3600, 3600.0),  # never above the request
        ((5000.0, 7000.0), None, 6000.0),  # no request: the mean as it is
    ],
)
def test_the_prediction_is_the_mean_of_the_last_two_runs_capped_by_the_request(
    runs: tuple[float, ...], walltime: int | None, expected: float
) -> None:
    history = RuntimeHistory()
    for run in runs:
        history.ended("alice", "", run)
    assert history.predict(spec(walltime=walltime)) == expected
    assert history.history("alice") == runs[-2:]


def test_users_are_predicted_apart_and_a_job_name_with_history_comes_first() -> None:
    history = RuntimeHistory()
    history.ended("alice", "short", 10.0)
    history.ended("alice", "long", 1000.0)
    history.ended("bob", "x", 50.0)
    assert history.predict(spec("alice", name="short")) == 10.0
    assert history.predict(spec("alice", name="long")) == 1000.0
    assert history.predict(spec("alice", name="new")) == 505.0  # the user's last two
    assert history.predict(spec("bob")) == 50.0
    assert history.predict(spec("carol")) == 3600.0


def test_a_running_job_keeps_the_prediction_it_started_with() -> None:
    history = RuntimeHistory()
    history.ended("alice", "", 100.0)
    assert history.started("1", spec()) == 100.0
    history.ended("alice", "", 900.0)  # the user's history moves on
    assert history.initial("1") == 100.0
    assert history.predict(spec()) == 500.0
    history.gone("1")
    assert history.initial("1") is None


def test_a_prediction_holds_while_the_job_has_not_outlived_it() -> None:
    assert extended(600.0, 0.0, 3600) == 600.0
    assert extended(600.0, 599.0, 3600) == 600.0


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [
        (600.0, 660.0),  # outlived: + 1 minute
        (659.0, 660.0),
        (660.0, 900.0),  # then + 5 minutes (of the initial prediction)
        (900.0, 1500.0),  # + 15 minutes
        (1500.0, 2400.0),  # + 30 minutes
        (2400.0, 3600.0),  # + 1 hour would pass the request: the request
    ],
)
def test_an_outlived_prediction_climbs_the_ladder_up_to_the_request(
    elapsed: float, expected: float
) -> None:
    assert extended(600.0, elapsed, 3600) == expected


def test_past_the_ladder_a_prediction_is_the_request_or_keeps_ahead_of_the_job() -> None:
    last = 600.0 + LADDER_S[-1]
    assert extended(600.0, last, 10**7) == 10**7
    assert extended(600.0, last, None) == last + LADDER_S[-1]
    assert extended(600.0, 10**9, None) > 10**9


class _Controller:
    """A controller service with one predictive queue and one one-slot host, on a clock the
    test moves; `run` submits a job of alice's that runs `seconds` and ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = [1000.0]
        self.settings = ControllerSettings(
            state_dir=tmp_path, queues=(QueueRecord("normal", plugins=("predictive",)),)
        )
        self.files = FileStore(tmp_path / "f", 1 << 20)
        self.service = ControllerService(self.settings, self.files, clock=self.now)
        self.gateway = WorkerGateway(self.service)

    def now(self) -> float:
        return self.clock[0]

    async def setup(self) -> None:
        await self.service.commit([ev.QueueCreated(self.now(), self.settings.queues[0])])
        await self.gateway.register(WorkerInfo("h", 1, 1000))

    async def run(self, seconds: float) -> str:
        job = await self.service.submit(
            SubmitRequest.from_fields(user="alice", command="x", walltime_s=3600)
        )
        assert await self.service.schedule_once() == 1
        self.clock[0] += seconds
        await self.gateway.finished("h", FinishReport(job, 0, 0))
        return job

    def next_term(self) -> ControllerService:
        """A restart or a failover: a new service over the same state."""
        return ControllerService(
            self.settings, self.files, state=self.service.state, clock=self.now
        )


async def test_the_controller_keeps_predictions_and_a_restart_rebuilds_them(
    tmp_path: Path,
) -> None:
    c = _Controller(tmp_path)
    await c.setup()
    await c.run(100.0)
    await c.run(300.0)
    service = c.service
    assert service.predictions.history("alice") == (100.0, 300.0)
    running = await service.submit(
        SubmitRequest.from_fields(user="alice", command="x", walltime_s=3600)
    )
    assert await service.schedule_once() == 1
    assert service.predictions.initial(running) == 200.0
    again = c.next_term()
    assert again.predictions.history("alice") == (100.0, 300.0)
    assert again.predictions.initial(running) == 200.0


def test_the_mean_wait_is_of_the_last_jobs_to_start() -> None:
    history = RuntimeHistory()
    assert history.mean_wait() is None  # nothing started: no measure of the queue
    history.waited(100.0)
    history.waited(300.0)
    assert history.mean_wait() == 200.0
    for _ in range(WAIT_WINDOW):  # the first two leave the window
        history.waited(50.0)
    assert history.mean_wait() == 50.0


async def test_the_controller_keeps_the_waits_and_a_restart_rebuilds_them(
    tmp_path: Path,
) -> None:
    """The waits the guard reads are fed at each start and rebuilt from the held jobs'
    starts: a new term's pass measures the queue as the last one did."""
    c = _Controller(tmp_path)
    await c.setup()
    service = c.service
    for waited in (40.0, 100.0):
        job = await service.submit(
            SubmitRequest.from_fields(user="alice", command="x", walltime_s=3600)
        )
        c.clock[0] += waited
        assert await service.schedule_once() == 1
        c.clock[0] += 10.0
        await c.gateway.finished("h", FinishReport(job, 0, 0))
    running = await service.submit(
        SubmitRequest.from_fields(user="alice", command="x", walltime_s=3600)
    )
    c.clock[0] += 160.0
    assert await service.schedule_once() == 1
    assert service.state.job(running).host
    assert service.predictions.mean_wait() == 100.0  # (40 + 100 + 160) / 3
    assert c.next_term().predictions.mean_wait() == 100.0


def test_what_job_show_reads_a_pending_and_a_running_jobs_prediction() -> None:
    from xce.core.model import JobRecord, JobState
    from xce.sched.predict import expected_of

    history = RuntimeHistory()
    history.ended("alice", "", 600.0)
    pending = JobRecord("1", 1, spec(), JobState.PEND, 0.0)
    assert expected_of(pending, history, 10.0) == (600.0, None)  # no end before it starts
    history.started("2", spec())
    running = JobRecord("2", 2, spec(), JobState.RUN, 0.0, host="h", start_time=100.0)
    assert expected_of(running, history, 200.0) == (600.0, 700.0)
    assert expected_of(running, history, 710.0) == (660.0, 760.0)  # outlived: + 1 min
    assert expected_of(running, history, 800.0) == (900.0, 1000.0)  # then + 5 min
    unknown = JobRecord("3", 3, spec(), JobState.RUN, 0.0, host="h", start_time=100.0)
    assert expected_of(unknown, history, 200.0) == (3600.0, 3700.0)  # by its walltime
    done = JobRecord("2", 2, spec(), JobState.DONE, 0.0, start_time=100.0, end_time=300.0)
    assert expected_of(done, history, 400.0) == (None, None)


def test_reseed_merges_the_stores_runs_with_the_held_jobs_each_attempt_once() -> None:
    history = RuntimeHistory()
    history.ended("alice", "", 999.0)  # what a seed saw: replaced, not added to
    state = ClusterState()
    runs = [
        ("1", 0, 10.0, "alice", "a", 100.0),
        ("2", 0, 20.0, "alice", "b", 300.0),
        ("3", 0, 30.0, "alice", "a", 500.0),
        ("3", 0, 30.0, "alice", "a", 500.0),  # the same attempt twice counts once
        ("4", 0, 5.0, "bob", "", 50.0),
    ]
    history.reseed(state, runs)
    assert history.history("alice") == (300.0, 500.0)  # the last two, in end order
    assert history.history("alice", "a") == (100.0, 500.0)
    assert history.history("bob") == (50.0,)


async def test_a_new_term_predicts_from_the_accounting_store_after_retention(
    tmp_path: Path,
) -> None:
    c = _Controller(tmp_path)
    feed = c.service.accounting = AccountingFeed(tmp_path, clock=c.now)
    feed.start()
    await c.setup()
    ended = [await c.run(100.0), await c.run(300.0)]
    assert c.service.predictions.predict(spec(walltime=3600)) == 200.0
    # Retention drops both jobs; the next term's state holds none of them.
    await c.service.commit([ev.JobsPurged(c.now(), tuple(ended))])
    again = c.next_term()
    assert again.predictions.predict(spec(walltime=3600)) == 3600.0  # the state alone
    await rebuild_predictions(again, feed)
    assert again.predictions.history("alice") == (100.0, 300.0)
    assert again.predictions.predict(spec(walltime=3600)) == 200.0
    feed.close()


class CountingHistory(RuntimeHistory):
    """A history that counts what a pass asks of it."""

    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def predict(self, spec: JobSpec) -> float | None:
        self.asked += 1
        return super().predict(spec)


def test_a_pass_works_a_prediction_out_once_for_jobs_alike() -> None:
    """Jobs submitted one by one each have their own spec: the pass asks the history once per
    group alike in user, name, request and queue, whatever else differs, and a queue that
    does not predict gets the request."""
    from dataclasses import replace

    from xce.sched.predict import per_alike, predictor

    history = CountingHistory()
    for run in (100.0, 300.0):
        history.ended("alice", "", run)
    base = spec()
    specs = [replace(base, command=f"./run {k}") for k in range(50)]  # alike
    specs += [replace(base, walltime_s=60, command=f"./run {k}") for k in range(50)]
    specs.append(replace(base, queue="other"))  # a queue that does not predict
    predict = predictor(history, frozenset({"normal"}))
    assert [predict(s) for s in specs] == [200.0] * 50 + [60.0] * 50 + [3600.0]
    assert history.asked == 2
    assert predict(specs[0]) == 200.0 and history.asked == 2  # known by the object too
    # per_alike: by id, the work done once per group alike
    done: list[JobSpec] = []

    def work(s: JobSpec) -> int | None:
        done.append(s)
        return s.walltime_s

    answers = per_alike({id(s): s for s in specs}, work)
    assert answers == {id(s): s.walltime_s for s in specs}
    assert len(done) == 3
