"""Run-time predictions from users' own history (EASY++: Tsafrir, Etsion and Feitelson 2007).

Users' requested times are poor estimates (most jobs use a fraction of them), so backfilling
on them reserves too late and lets too few jobs through. A user's next job tends to run
about as long as their last ones: the prediction of a job is the average run time of the
same user's last two jobs that ran and ended (of the same user and job name when that name
has history), never more than the request, which stays the job's kill limit. A user with no
history gets the request.

A running job that outlives its prediction gets a longer one, as Tsafrir et al. do: its
initial prediction plus the next step of a fixed ladder (1 min, 5 min, 15 min, 30 min, 1 h,
2 h, 5 h, 10 h, 20 h, 50 h, 100 h) that lies beyond the time it has run, capped by the
request (`extended`). That depends only on the initial prediction, the elapsed time and the
request, so every pass recomputes it and reservations move with it.

`RuntimeHistory` is fed the jobs that end and start (the controller's event listener, like
the fairshare `UsageLedger`, and the simulator); the scheduler only reads it
(`Snapshot.predictions`). After a restart it is rebuilt from the jobs still held in the
state (`seed`), replaying their starts and ends in time order, so the predictions are a
function of the state's records, not of what the process happened to see. Retention drops
finished jobs from the state, so each primary term then rebuilds the run times once more
from the accounting store's ended attempts, which outlive retention (`reseed`, fed by
xce/controller/prediction_records.py): a user whose last jobs were purged is predicted as
before the restart, not by the request.

The history also keeps how long the last `WAIT_WINDOW` jobs to start had waited
(`mean_wait`): the `short-first` order's starvation guard measures a job's wait against it
(xce/sched/plugins/short_first.py), so "waited too long" follows what the queue is making
jobs wait now, not only the job's own request. It is fed at each start and rebuilt by `seed`
from the starts of the jobs the state holds, in start order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol, TypeVar

from xce.core import events as ev
from xce.core.model import JobRecord, JobSpec, JobState
from xce.core.state import ClusterState

if TYPE_CHECKING:
    from xce.sched.snapshot import RunningJob

# Tsafrir et al.'s increments, seconds: a prediction found short becomes the initial
# prediction plus the first of these that takes it past the time the job has run.
LADDER_S: tuple[int, ...] = (
    60,
    300,
    900,
    1800,
    3600,
    7200,
    18000,
    36000,
    72000,
    180000,
    360000,
)
INFINITE = float("inf")
HISTORY = 2  # run times kept per user (and per user and job name): EASY++ averages two
# Waits kept (of the jobs that started last) for the guard's measure of the queue: enough
# that one burst of jobs started at once does not swing it (1,000 did on the one-user
# Lublin trace: docs/performance.md), few enough that the state still holds them after a
# restart
WAIT_WINDOW = 10_000
# What a pending job's prediction is a function of (`Predictions.predict`, and whether its
# queue predicts): a pass works a prediction out once for the jobs alike in these.
PREDICTED_BY = attrgetter("queue", "user", "name", "walltime_s")
T = TypeVar("T")
# One ended attempt that ran: (job id, attempt, end time, user, job name, run seconds).
EndedRun = tuple[str, int, float, str, str, float]


def extended(predicted: float, elapsed: float, limit: float | None) -> float:
    """The prediction of a job first predicted to run `predicted` seconds that has run
    `elapsed` seconds: unchanged while it has not run that long, else the initial prediction
    plus the first ladder step that lies beyond `elapsed` (past the ladder: the request, or
    elapsed plus the last step without one); never above `limit` (the request)."""
    if elapsed < predicted:
        return predicted
    for step in LADDER_S:
        if predicted + step > elapsed:
            grown = predicted + step
            break
    else:
        grown = limit if limit is not None else elapsed + LADDER_S[-1]
    return grown if limit is None or grown < limit else float(limit)


def capped(mean: float | None, limit: int | None) -> float | None:
    """A prediction from history `mean`, never above the request (None: unknown)."""
    if mean is None:
        return None if limit is None else float(limit)
    return mean if limit is None or mean < limit else float(limit)


class Predictions(Protocol):
    """What a scheduling pass reads of the predictions (`Snapshot.predictions`)."""

    def predict(self, spec: JobSpec) -> float | None:
        """Seconds a pending job of `spec` is expected to run (None: no idea, no limit): a
        function of its user, name and walltime only (a pass shares it among jobs alike in
        those: `PREDICTED_BY`)."""
        ...

    def initial(self, job_id: str) -> float | None:
        """The prediction a running job was given when it started (None: not known)."""
        ...

    def mean_wait(self) -> float | None:
        """The average wait of the last jobs to start (None: none has started)."""
        ...


class RuntimeHistory:
    """The last run times per user and per (user, job name), and each running job's
    prediction made when it started. Read by the pass; fed by the controller and the
    simulator."""

    __slots__ = ("_by_name", "_by_user", "_means", "_started", "_wait_total", "_waits")

    def __init__(self) -> None:
        self._by_user: dict[str, tuple[float, ...]] = {}
        self._by_name: dict[tuple[str, str], tuple[float, ...]] = {}
        # what `predict` reads: user -> mean, (user, name) -> mean (kept as runs end)
        self._means: dict[object, float] = {}
        self._started: dict[str, float | None] = {}
        # the waits of the last WAIT_WINDOW jobs to start, oldest first, and their sum
        self._waits: deque[float] = deque()
        self._wait_total = 0.0

    # --- feeding ------------------------------------------------------------------------

    def ended(self, user: str, name: str, run_s: float) -> None:
        """A job of `user` named `name` ran `run_s` seconds and ended."""
        run = max(0.0, float(run_s))
        runs = self._by_user[user] = (*self._by_user.get(user, ())[1 - HISTORY :], run)
        self._means[user] = sum(runs) / len(runs)
        key = (user, name)
        runs = self._by_name[key] = (*self._by_name.get(key, ())[1 - HISTORY :], run)
        self._means[key] = sum(runs) / len(runs)

    def started(self, job_id: str, spec: JobSpec) -> float | None:
        """Job `job_id` starts now: its prediction is fixed (and returned) until it ends."""
        predicted = self._started[job_id] = self.predict(spec)
        return predicted

    def waited(self, wait_s: float) -> None:
        """A job starts now after waiting `wait_s` seconds since its submission."""
        waits = self._waits
        wait = max(0.0, float(wait_s))
        waits.append(wait)
        self._wait_total += wait
        if len(waits) > WAIT_WINDOW:
            self._wait_total -= waits.popleft()

    def gone(self, job_id: str) -> None:
        """Job `job_id` no longer runs (ended, requeued, killed)."""
        self._started.pop(job_id, None)

    # --- reading ------------------------------------------------------------------------

    def mean(self, user: str, name: str = "") -> float | None:
        """The average of the last run times of `user`'s jobs named `name` when those have
        history, else of all `user`'s jobs; None when the user has none."""
        means = self._means
        found = means.get((user, name)) if name else None
        return found if found is not None else means.get(user)

    def predict(self, spec: JobSpec) -> float | None:
        return capped(self.mean(spec.user, spec.name), spec.walltime_s)

    def initial(self, job_id: str) -> float | None:
        return self._started.get(job_id)

    def mean_wait(self) -> float | None:
        waits = self._waits
        # (a running sum: never below 0 by the rounding of what left the window)
        return max(0.0, self._wait_total) / len(waits) if waits else None

    def history(self, user: str, name: str = "") -> tuple[float, ...]:
        """The run times kept for `user` (and `name` when given), oldest first."""
        if name:
            return self._by_name.get((user, name), ())
        return self._by_user.get(user, ())

    # --- the controller's side ----------------------------------------------------------

    def observe(self, event: ev.Event, state: ClusterState) -> None:
        """Listener for applied events: a start fixes the job's prediction, an end of a job
        that ran records its run time, anything else that stops it forgets the prediction."""
        job_id = getattr(event, "job_id", None)
        if job_id is None:
            return
        if isinstance(event, ev.JobStarted):
            job = state.jobs.get(job_id)
            if job is not None:
                self.started(job_id, job.spec)
                if job.start_time is not None:
                    self.waited(job.start_time - job.submit_time)
            return
        if job_id not in self._started:
            return
        job = state.jobs.get(job_id)
        if job is None or job.state in (JobState.DONE, JobState.EXIT):
            self.gone(job_id)
            if job is not None:
                self._record(job)
        elif job.state is JobState.PEND:  # requeued: predicted afresh at its next start
            self.gone(job_id)

    def _record(self, job: JobRecord) -> None:
        if job.start_time is not None and job.end_time is not None:
            self.ended(job.spec.user, job.spec.name, job.end_time - job.start_time)

    def reseed(self, state: ClusterState, runs: Iterable[EndedRun]) -> None:
        """Rebuild the run times from `runs` (ended attempts that ran, as the accounting
        store keeps them: enough of each user's and each user and name's newest) and the
        finished jobs `state` holds, each attempt once, in end order. Running jobs keep the
        prediction they started with."""
        ended: dict[tuple[str, int], EndedRun] = {}
        for run in runs:
            ended[(run[0], run[1])] = run
        for job in state.jobs.values():
            if job.state not in (JobState.DONE, JobState.EXIT):
                continue
            start, end = job.start_time, job.end_time
            if start is not None and end is not None:
                key = (job.id, job.attempt)
                ended[key] = (*key, end, job.spec.user, job.spec.name, end - start)
        self._by_user.clear()
        self._by_name.clear()
        self._means.clear()
        for _, _, _, user, name, run_s in sorted(ended.values(), key=lambda r: (r[2], r[0])):
            self.ended(user, name, run_s)

    def seed(self, state: ClusterState) -> None:
        """Rebuild from the jobs held in `state` (after recovery): the ends of finished jobs
        and the starts of active ones, in time order (ends first at one instant, as a pass
        runs after the ends it sees), so active jobs get the prediction they had; and the
        waits of the jobs that started, finished or not, in start order."""
        for job in _in_time_order(state.jobs.values()):
            if job.state in (JobState.DONE, JobState.EXIT):
                self._record(job)
            else:
                self.started(job.id, job.spec)
        for job in _in_start_order(state.jobs.values()):
            assert job.start_time is not None
            self.waited(job.start_time - job.submit_time)


def expected_of(
    job: JobRecord, predictions: Predictions, now: float
) -> tuple[float | None, float | None]:
    """(predicted run seconds, expected end) of `job` as the scheduler sees them now: a
    pending job's prediction (no end yet), a running job's prediction at its start extended
    while it outlives it and its start plus that; (None, None) for a job that has ended or
    that nothing predicts (no walltime, no history)."""
    if job.state is JobState.PEND or job.state is JobState.PSUSP:
        return predictions.predict(job.spec), None
    if job.start_time is None or job.state.finished:
        return None, None
    first = predictions.initial(job.id)
    wall = job.spec.walltime_s
    if first is None:
        return (None, None) if wall is None else (float(wall), job.start_time + wall)
    grown = extended(first, now - job.start_time, wall)
    return grown, job.start_time + grown


def predictor(
    predictions: Predictions, queues: frozenset[str]
) -> Callable[[JobSpec], float | None]:
    """Seconds a pending job is expected to run, for one pass: its prediction in a queue
    that predicts (`queues`), its walltime elsewhere. Asked once per spec object (jobs
    alike share one, and a spec stays alive through the pass with its job), and worked out
    once per group of specs alike in what it depends on (`PREDICTED_BY`): jobs submitted
    one by one each have their own spec, equal or not."""
    known: dict[int, float | None] = {}
    alike: dict[tuple[str, str, str, int | None], float | None] = {}
    ask = predictions.predict

    def predict(spec: JobSpec) -> float | None:
        try:
            return known[id(spec)]
        except KeyError:
            pass
        by = PREDICTED_BY(spec)
        if by in alike:
            value = alike[by]
        else:
            value = alike[by] = ask(spec) if spec.queue in queues else spec.walltime_s
        known[id(spec)] = value
        return value

    return predict


def per_alike(specs: dict[int, JobSpec], work: Callable[[JobSpec], T]) -> dict[int, T]:
    """`work(spec)` for each of `specs` (id -> spec), by id, done once per group of specs
    alike in what a prediction depends on (`PREDICTED_BY`): `work` must depend on no more.
    The work per spec is done by `map` and `dict` (a pass asks this of every waiting job)."""
    distinct = specs.values()
    alike = list(map(PREDICTED_BY, distinct))
    answers = {key: work(spec) for key, spec in dict(zip(alike, distinct, strict=True)).items()}
    return dict(zip(specs, map(answers.__getitem__, alike), strict=True))


def expecter(predictions: Predictions, now: float) -> Callable[[RunningJob], float]:
    """When a running job is expected to end: its start plus the prediction it started
    with, extended while it outlives it (xce/sched/predict.py); by its walltime when it
    started with none; never (infinity) without either."""
    initial = predictions.initial

    def expect(job: RunningJob) -> float:
        wall = job.walltime_s
        first = initial(job.job_id)
        if first is None:
            return INFINITE if wall is None else job.start_time + wall
        return job.start_time + extended(first, now - job.start_time, wall)

    return expect


def _in_start_order(jobs: Iterable[JobRecord]) -> list[JobRecord]:
    """The jobs that have started (by their last attempt's start), by start time, then by
    job number and task index (the order the state numbered them)."""
    steps: list[tuple[float, int, int, JobRecord]] = []
    for job in jobs:
        if job.start_time is not None:
            index = -1 if job.array_index is None else job.array_index
            steps.append((job.start_time, job.number, index, job))
    steps.sort(key=lambda step: step[:3])
    return [step[3] for step in steps]


def _in_time_order(jobs: Iterable[JobRecord]) -> list[JobRecord]:
    """Finished jobs by end, active ones by start; ends first at one instant, then by job
    number and task index (the order the state numbered them)."""
    steps: list[tuple[float, int, int, int, JobRecord]] = []
    for job in jobs:
        index = -1 if job.array_index is None else job.array_index
        if job.state in (JobState.DONE, JobState.EXIT):
            if job.start_time is not None and job.end_time is not None:
                steps.append((job.end_time, 0, job.number, index, job))
        elif job.start_time is not None and job.state in (
            JobState.RUN,
            JobState.USUSP,
            JobState.SSUSP,
        ):
            steps.append((job.start_time, 1, job.number, index, job))
    steps.sort(key=lambda step: step[:4])
    return [step[4] for step in steps]
