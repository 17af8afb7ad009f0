"""Replay a workload in virtual time through the live scheduler: `xce simulate`.

The simulator keeps the cluster as the scheduler sees it (xce/sched/sim/cluster.py: the
pending, running and host views a `ClusterState` and its `SnapshotCache` would give after
the same HostRegistered, JobSubmitted, JobStarted and JobFinished events, checked against
a real ClusterState at every pass by tests/sched/test_simcluster.py) and asks the same
`pipeline.plan(snapshot, now)` as the controller for placements, so a policy behaves here
as it does live. At each instant, in this order: jobs reaching their end finish (a job
whose run time exceeds its requested time is killed at the requested time, like a real
cluster enforcing walltime), new jobs are submitted, then one scheduling pass runs if a host
has room. Hosts are `hosts` identical machines of `slots` slots; a job of `p` processors
wider than one host is packed on ceil(p / slots) hosts (`span[ptile=slots]`), so
`--hosts N --slots 1` and `--hosts 1 --slots N` decide alike; only a job wider than the
whole machine is skipped.

Metrics, as papers on the Parallel Workloads Archive give them: average and median wait
(start - submit), average bounded slowdown `max(1, (wait + run) / max(run, tau))` with
tau = 10 s, utilisation (busy slot-seconds over slots x makespan) and makespan (last end -
first submit); `detail()` breaks wait and slowdown down by job size (powers of two).

Speed: no job records, only the views a pass reads, made once per job (specs
shared by jobs alike, running views made when a pass first reads them); the pass sees
pending jobs in submission order as they are (no walk of the queue), shares what it derives
from the unchanged hosts and queue with the next pass (xce/sched/passes/memo.py), and runs with
`explain=False` (no reason for every waiting job), so it stops as soon as nothing more can
start. A pass that could start nothing is not run: the smallest pending job needs more
slots than the freest host has, or, under strict FCFS, the oldest job does not fit.
The cyclic garbage collector is paused for the replay (`_cyclic_gc_paused`: reference
counting frees all it makes). bench/refsim.py is the yardstick (`python -m bench`, figure 8).

Inputs (presets, hosts, reservations, job specs) are in xce/sched/sim/inputs.py, outcomes and
metrics in xce/sched/sim/result.py; this module replays, and exports their names too.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from typing import Protocol

from xce.config.scheduler import PredictiveSettings
from xce.core.deps import DepStatus
from xce.core.model import HostRecord, JobSpec, QueueRecord, ReservationRecord
from xce.sched.passes.advance import wake_times
from xce.sched.passes.pipeline import plan
from xce.sched.plugins import builtin
from xce.sched.predict import RuntimeHistory, extended
from xce.sched.sim.cluster import SimCluster
from xce.sched.sim.inputs import (
    HOST_MEMORY_MB,
    SpecMemo,
    executed_time,
    host_names,
    plugins_for,
    spec_for,
)
from xce.sched.sim.result import Outcome, SimResult
from xce.sched.sim.swf import SwfJob
from xce.sched.snapshot import DEFAULT_PREDICTIVE, PendingJob, Snapshot
from xce.sched.types import Placement
from xce.sched.usage import UsageLedger

__all__ = ["Witness", "simulate"]


_SATISFIED = DepStatus.SATISFIED
_COLLECT_EVERY = 1 << 16  # passes between young collections while the collector is paused


class _Needs:
    """Pending jobs counted by the slots each needs on its most loaded host (min(procs,
    slots)), with the smallest kept: when even it exceeds every host's free slots, no
    policy can start anything (plugins only restrict, the simulator does not preempt), so
    the pass is skipped without building a snapshot. A skipped pass would have placed
    nothing, so the results are the same. Not kept under strict FCFS, which asks its oldest
    job instead (`_Replay.run`)."""

    __slots__ = ("counts", "least")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.least = 0  # 0: none pending

    def add(self, need: int) -> None:
        self.counts[need] = self.counts.get(need, 0) + 1
        if not self.least or need < self.least:
            self.least = need

    def remove(self, need: int) -> None:
        left = self.counts[need] - 1
        if left:
            self.counts[need] = left
            return
        del self.counts[need]
        if need == self.least:
            self.least = min(self.counts) if self.counts else 0


def simulate(
    jobs: list[SwfJob],
    hosts: int,
    slots: int,
    policy: str = "first-fit",
    half_life_s: float = 3600.0,
    skipped: int = 0,
    progress: Callable[[int], None] | None = None,
    gpus_per_host: int = 0,
    reservations: Sequence[ReservationRecord] = (),
    witness: Witness | None = None,
    predictive: PredictiveSettings | None = None,
) -> SimResult:
    """Replay `jobs` (sorted by submit time) on `hosts` x `slots`; see the module doc.
    `progress`, if given, is called now and then with the number of jobs ended so far.
    `reservations` (absolute times, host names of `host_names`) are added before the first
    job, and a pass runs at each of their starts and ends (nothing else would wake one).
    `witness` (tests) sees every change and every snapshot planned. `predictive`: the
    `[scheduler.predictive]` settings of a policy that predicts run times."""
    plugins = plugins_for(policy)
    started = time.perf_counter()
    result = SimResult(policy, plugins, hosts, slots, [], skipped)
    with _cyclic_gc_paused():
        replay = _Replay(
            jobs, result, half_life_s, gpus_per_host, reservations, witness, predictive
        )
        replay.run(progress)
        ended = replay.ended
        # freed here by reference counting (the cluster, its views, the agenda), before
        # the collector is back: else its first young collection walks all of it
        del replay
    result.seconds = time.perf_counter() - started
    if progress is not None:
        progress(ended)
    return result


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a replay, as it was after.

    A replay allocates millions of objects (a spec, views, an outcome per job), most of
    which outlive a young collection, so the collector walks them again and again, and its
    full collections walk the whole trace and every outcome: a sixth of a 300k-job replay.
    Nothing the replay makes is freed only by it: reference counting frees every pass (a
    pass lets go of its candidate sets that refer back to its host pool, `plan`), every
    ended job and, at the end, the simulated cluster (its snapshot's running views do not
    refer back to it) (tests/sched/test_simulate.py checks, for every preset, `pack` and `spread`,
    that what a replay leaves to the collector does not grow with the trace). In case a
    plugin makes cycles, the young generation (what was made since) is still collected
    every `_COLLECT_EVERY` passes (`_Replay.run`).

    (Moving what the replay keeps to the oldest generation as the collector comes back,
    `gc.freeze()` then `gc.unfreeze()`, saved the young collection that then walks it,
    2-4 % of a short replay, but it moves the whole process's young objects, garbage
    cycles included, and resets the counts that trigger full collections: a process
    replaying again and again never collected its cycles. Not done.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _hosts(first: float, hosts: int, slots: int, gpus_per_host: int) -> list[HostRecord]:
    """The simulated hosts, as HostRegistered at the first submit would record them."""
    devices = (("gpu", ",".join(map(str, range(gpus_per_host)))),) if gpus_per_host else ()
    return [
        HostRecord(
            name,
            slots,
            HOST_MEMORY_MB,
            (),
            registered_at=first,
            changed_at=first,
            gres=devices,
        )
        for name in host_names(hosts)
    ]


class Witness(Protocol):
    """Sees every change the replay makes and every snapshot it plans: a test drives a
    real ClusterState with the same events beside it (tests/sched/test_simcluster.py)."""

    def submitted(self, now: float, number: int, spec: JobSpec) -> None: ...
    def started(self, now: float, placement: Placement) -> None: ...
    def finished(self, now: float, job_id: str, killed: bool) -> None: ...
    def planning(self, snapshot: Snapshot, now: float) -> None: ...


class _Replay:
    """One run of `simulate`: the simulated cluster (the scheduler's view of it, kept
    event by event: xce/sched/sim/cluster.py), fairshare's usage, and the agenda.

    The agenda is three streams merged by time: the arrivals (the trace's jobs, in submit
    order), the reservation wake-ups (sorted), and a heap of the running jobs' ends, (time,
    seq, Outcome); at one instant ends come first, then arrivals, then wake-ups, then one
    pass (module doc). Only running jobs are on the heap: a trace's million arrivals are
    not pushed and popped through it."""

    def __init__(
        self,
        jobs: list[SwfJob],
        result: SimResult,
        half_life_s: float,
        gpus_per_host: int,
        reservations: Sequence[ReservationRecord],
        witness: Witness | None = None,
        predictive: PredictiveSettings | None = None,
    ) -> None:
        self.result, self.hosts, self.slots = result, result.hosts, result.slots
        first = jobs[0].submit if jobs else 0.0
        queue_policy = builtin().policy_for(result.plugins)
        # run-time predictions, kept as the controller keeps them (xce/sched/predict.py),
        # only for a policy that reads them
        self.history = RuntimeHistory() if queue_policy.predicts else None
        # an order with a starvation guard changes when a job starts starving, with no
        # event: a pass runs at that instant (`guards` in `run`)
        self.guard_at = getattr(queue_policy.order, "wakes_at", None)
        # and when the oldest waiting job starts starving by the queue's waits, which move
        # only as jobs start (`queue_guard_at` in `run`)
        self.queue_guard_at = getattr(queue_policy.order, "queue_wakes_at", None)
        self.predictive = predictive or DEFAULT_PREDICTIVE
        self.cluster = SimCluster(
            QueueRecord("normal", plugins=result.plugins),
            _hosts(first, self.hosts, self.slots, gpus_per_host),
            reservations,
            self.history,
            predictive,
        )
        self.witness = witness
        self.ledger = UsageLedger(half_life_s)
        self.groups = {j.user: j.group for j in jobs}
        self.fair = queue_policy.reads_usage  # usage is read by fairshare only
        # Strict FCFS in the one queue: after a pass blocked at a job, jobs that arrive
        # sort behind it, so until a job ends (or it starts) no pass can start anything.
        self.strict_fcfs = (
            queue_policy.submission_order and not self.fair and queue_policy.blocks_queue
        )
        self.ends: list[tuple[float, int, Outcome]] = []  # a heap
        self.seq = 0
        self.arrivals = self._runnable(jobs, gpus_per_host)
        # one spec per shape of job, where the trace's jobs are often alike
        self.specs = (
            SpecMemo(self.slots, queue=self.cluster.queue.name)
            if SpecMemo.worth_it(self.arrivals)
            else None
        )
        self.wakes = sorted(wake_times(reservations, first))
        self._expiry_seq = 0
        self.ended = 0
        self.needs = _Needs()

    def _runnable(self, jobs: list[SwfJob], gpus_per_host: int) -> list[SwfJob]:
        """The jobs that can run, in submit order (the trace's order among equal times);
        the others are counted as skipped: wider than the machine, or asking GPUs the
        hosts lack or GPUs on a job wider than a host (not granted across hosts)."""
        slots, width = self.slots, self.slots * self.hosts
        runnable = [
            job
            for job in jobs
            if job.procs <= width
            and job.gpus <= gpus_per_host
            and not (job.gpus and job.procs > slots)
        ]
        self.result.skipped += len(jobs) - len(runnable)
        runnable.sort(key=attrgetter("submit"))  # stable: a sorted trace stays as it is
        return runnable

    def run(self, progress: Callable[[int], None] | None) -> None:
        """The agenda, instant by instant. The three kinds of event are handled inline:
        this loop runs three times per job, and a call per event was a tenth of a replay."""
        ends, pop, push = self.ends, heapq.heappop, heapq.heappush
        arrivals, wakes = self.arrivals, self.wakes
        arrived, woken, last_arrival, last_wake = 0, 0, len(arrivals), len(wakes)
        cluster, needs, witness = self.cluster, self.needs, self.witness
        outcomes, specs, slots = self.result.outcomes, self.specs, self.slots
        queue = cluster.queue.name
        fair, charge, usage_at = self.fair, self.ledger.charge, self.ledger.usage
        snapshot_of, groups, result = cluster.snapshot, self.groups, self.result
        passes = result.passes
        satisfied = _SATISFIED
        seq, ended, blocked = self.seq, 0, False
        strict_fcfs, oldest = self.strict_fcfs, 0
        never = float("inf")
        # predictions: each running job's next expiry while it outlives its prediction,
        # (time, seq, outcome, initial prediction), a heap: the controller's next pass
        # after it sees the prediction extended and the reservation moved
        history = self.history
        expiries: list[tuple[float, int, Outcome, float]] = []
        # when each waiting job starts starving (an order with a guard): (time, seq, outcome)
        guard_at, predictive = self.guard_at, self.predictive
        guards: list[tuple[float, int, Outcome]] = []
        queue_guard_at = self.queue_guard_at if history is not None else None
        waiting_from, queue_woken = 0, never  # the oldest waiting job's index, its wake
        while True:
            now = ends[0][0] if ends else never
            if arrived < last_arrival and arrivals[arrived].submit < now:
                now = arrivals[arrived].submit
            if woken < last_wake and wakes[woken] < now:
                now = wakes[woken]
            if expiries and expiries[0][0] < now:
                now = expiries[0][0]
            if guards and guards[0][0] < now:
                now = guards[0][0]
            if now == never:
                break
            while ends and ends[0][0] == now:  # jobs end
                outcome = pop(ends)[2]
                blocked = False
                ended_spec = cluster.finish(outcome.job_id)
                if history is not None:  # what RuntimeHistory.observe records
                    began = outcome.start
                    assert began is not None
                    history.gone(outcome.job_id)
                    history.ended(ended_spec.user, ended_spec.name, now - began)
                if fair:  # what UsageLedger.observe charges for a job that ended
                    job, began = outcome.job, outcome.start
                    assert began is not None  # every job on the heap has started
                    charge(job.user, job.procs * max(0.0, now - began), now)
                if witness is not None:
                    witness.finished(now, outcome.job_id, outcome.killed)
                outcome.end = now
                ended += 1
                if progress is not None and not ended % 1024:
                    progress(ended)
            while arrived < last_arrival and arrivals[arrived].submit == now:  # jobs arrive
                job = arrivals[arrived]
                arrived += 1
                number = len(outcomes) + 1  # numbered as ClusterState numbers them
                spec = specs(job) if specs is not None else spec_for(job, queue, slots)
                job_id = str(number)
                cluster.submit(PendingJob(job_id, number, None, spec, satisfied, now))
                if witness is not None:
                    witness.submitted(now, number, spec)
                outcome = Outcome(job, job_id)
                outcomes.append(outcome)
                if guard_at is not None:
                    starving = guard_at(now, spec.walltime_s, predictive)
                    if starving is not None:
                        push(guards, (starving, seq, outcome))
                        seq += 1
                if not strict_fcfs:  # (strict FCFS asks the oldest job instead)
                    needs.add(job.procs if job.procs < slots else slots)  # (min(): a call)
            while woken < last_wake and wakes[woken] == now:  # a reservation starts or ends
                woken += 1
                blocked = False
            while expiries and expiries[0][0] == now:  # a job outlives its prediction
                _, _, outcome, initial = pop(expiries)
                blocked = False
                self._expire(expiries, outcome, initial, now)
            while guards and guards[0][0] == now:  # a waiting job starts starving
                if pop(guards)[2].start is None:
                    blocked = False
            if blocked:
                continue
            if strict_fcfs:  # strict order starts nothing unless the oldest job fits
                # the oldest waiting job is the first outcome not started (numbers follow
                # submission); found from the last one, not by stepping over the holes
                # the pending dict keeps where started jobs were
                waiting = len(outcomes)
                while oldest < waiting and outcomes[oldest].start is not None:
                    oldest += 1
                if oldest == waiting:
                    continue
                need = outcomes[oldest].job.procs
                if (need if need < slots else slots) > cluster.most_free:
                    # and it will not until a job ends (or a reservation starts or ends):
                    # arrivals free nothing and sort behind it
                    blocked = True
                    continue
            else:
                least = needs.least
                if not least or least > cluster.most_free:
                    continue
            # One scheduling pass through the live pipeline (inline: a call per pass was
            # 5 % of a replay of short passes). It runs only when it may start something:
            # a job waits, it is not a strict FCFS pass that already blocked, and the
            # smallest need (under strict FCFS: the oldest job's) fits the freest host.
            snapshot = snapshot_of(usage_at(now) if fair else None, groups)
            if witness is not None:
                witness.planning(snapshot, now)
            decided = plan(snapshot, now, False)  # explain=False (positional: a cheaper call)
            passes += 1
            if not passes % _COLLECT_EVERY:
                gc.collect(0)  # cycles a plugin may have made (`_cyclic_gc_paused`)
            # after a strict FCFS pass blocked at a job, jobs that arrive sort behind it:
            # until a job ends (or a reservation starts or ends) no pass starts anything
            if strict_fcfs:  # (a loop: a generator per pass cost more than the test)
                for kept in decided.reservations:
                    if kept["host"] == "*":
                        blocked = True
                        break
            for placement in decided.placements:
                view = cluster.start(placement, now)
                if witness is not None:
                    witness.started(now, placement)
                outcome = outcomes[view.number - 1]
                job = outcome.job
                if not strict_fcfs:
                    needs.remove(job.procs if job.procs < slots else slots)
                parts = placement.hosts
                where = "+".join(p.host for p in parts) if len(parts) > 1 else placement.host
                outcome.start, outcome.host = now, where
                ran = executed_time(job)
                push(ends, (now + ran, seq, outcome))
                seq += 1
                if history is not None:
                    history.waited(now - view.submit_time)  # what observe records
                    predicted = history.started(placement.job_id, view.spec)
                    if predicted is not None and predicted < ran:  # it will outlive it
                        push(expiries, (now + predicted, seq, outcome, predicted))
                        seq += 1
            if queue_guard_at is not None and history is not None:
                # the oldest waiting job (outcomes follow submission; the index only moves
                # on) starves at its submit plus the queue's bound as it stands after this
                # pass's starts; the jobs after it keep their place in the order either way
                waiting = len(outcomes)
                while waiting_from < waiting and outcomes[waiting_from].start is not None:
                    waiting_from += 1
                if waiting_from < waiting:
                    oldest_job = outcomes[waiting_from]
                    starving = queue_guard_at(
                        oldest_job.job.submit, history.mean_wait(), predictive
                    )
                    if starving is not None and now < starving != queue_woken:
                        queue_woken = starving
                        push(guards, (starving, seq, oldest_job))
                        seq += 1
        self.seq, self.ended, result.passes = seq, ended, passes

    def _expire(
        self,
        expiries: list[tuple[float, int, Outcome, float]],
        outcome: Outcome,
        first: float,
        now: float,
    ) -> None:
        """`outcome`'s job has run as long as it was predicted to: its next expiry (the
        extended prediction, xce/sched/predict.py) goes on the heap if it ends later."""
        began = outcome.start
        assert began is not None
        job = outcome.job
        grown = extended(first, now - began, job.requested_time)
        if grown < executed_time(job) and began + grown > now:
            heapq.heappush(expiries, (began + grown, self.seq_next(), outcome, first))

    def seq_next(self) -> int:
        """A tie-breaker for the expiry heap (never equal to another entry's)."""
        self._expiry_seq -= 1
        return self._expiry_seq
