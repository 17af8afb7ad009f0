"""The live controller service, given the same jobs and hosts at the same instants, starts
the same jobs on the same hosts at the same times as the simulator.

The live side goes through the real `ControllerService` and `WorkerGateway`: hosts
register as workers do, jobs are submitted as the API does, finish reports arrive as
workers send them, and `schedule_once` runs the controller's own pass (with its usage
ledger for fairshare). Only the clock is virtual.
"""

from __future__ import annotations

import heapq
import random
from pathlib import Path

import pytest

from xce.config.scheduler import PredictiveSettings, SchedulerSettings
from xce.config.settings import ControllerSettings
from xce.controller.requests import FinishReport, SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.sched.plugins import builtin
from xce.sched.predict import extended
from xce.sched.sim.inputs import HOST_MEMORY_MB, executed_time, host_names, plugins_for
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfJob
from xce.sched.sim.workload import synthetic

HOSTS, SLOTS = 4, 8


async def live(
    jobs: list[SwfJob],
    policy: str,
    tmp_path: Path,
    predictive: PredictiveSettings | None = None,
) -> list[tuple[float, int, str]]:
    from xce.store.files import FileStore

    clock = [jobs[0].submit]
    groups = {}
    for job in jobs:
        groups.setdefault(job.group, []).append(job.user)
    settings = ControllerSettings(
        state_dir=tmp_path / "state",
        queues=(QueueRecord("normal", plugins=plugins_for(policy)),),
        scheduler=SchedulerSettings(
            groups=tuple((g, tuple(sorted(set(u)))) for g, u in groups.items()),
            predictive=predictive or PredictiveSettings(),
        ),
    )
    service = ControllerService(
        settings, FileStore(tmp_path / "files", 1 << 20), clock=lambda: clock[0]
    )
    await service.commit([ev.QueueCreated(clock[0], settings.queues[0])])
    gateway = WorkerGateway(service)
    for name in host_names(HOSTS):
        await gateway.register(WorkerInfo(name, SLOTS, HOST_MEMORY_MB))
    order = builtin().policy_for(plugins_for(policy)).order
    wakes_at = getattr(order, "wakes_at", lambda *_: None)
    queue_wakes_at = getattr(order, "queue_wakes_at", None)
    queue_woken = float("inf")
    pending: list[tuple[float, int, int, object]] = [
        (j.submit, 1, i, j) for i, j in enumerate(jobs)
    ]
    heapq.heapify(pending)
    trace_of: dict[str, SwfJob] = {}
    decisions: list[tuple[float, int, str]] = []
    seq = len(jobs)
    while pending:
        now = clock[0] = pending[0][0]
        while pending and pending[0][0] == now:
            _, kind, _, payload = heapq.heappop(pending)
            if kind == 0:
                job_id, host = payload  # type: ignore[misc]
                await gateway.finished(host, FinishReport(job_id, 0, 0))
            elif kind == 3:  # a waiting job starts starving: the pass below sees it
                pass
            elif kind == 2:  # a running job outlived its prediction
                following = _next_expiry(payload, now)
                if following is not None:
                    heapq.heappush(pending, (following[0], 2, seq, following[1]))
                    seq += 1
            else:
                job: SwfJob = payload  # type: ignore[assignment]
                job_id = await service.submit(
                    SubmitRequest.from_fields(
                        user=job.user,
                        command="swf job",
                        name="swf",
                        slots=job.procs,
                        walltime_s=job.requested_time,
                    )
                )
                trace_of[job_id] = job
                # an order with a starvation guard: the controller's pass every second sees
                # the job starving; here one pass at that instant, as the simulator
                starving = wakes_at(now, job.requested_time, settings.scheduler.predictive)
                if starving is not None:
                    heapq.heappush(pending, (starving, 3, seq, None))
                    seq += 1
        before = {j for j in trace_of if service.state.job(j).host}
        await service.schedule_once()
        for job_id, job in trace_of.items():
            record = service.state.job(job_id)
            if record.host and job_id not in before and record.start_time == now:
                decisions.append((now, job.number, record.host))
                heapq.heappush(pending, (now + executed_time(job), 0, seq, (job_id, record.host)))
                seq += 1
                # a job that will outlive its prediction: the controller's passes (every
                # second) see it extended; here one pass at each expiry, as the simulator
                first = service.predictions.initial(job_id)
                if first is not None and first < executed_time(job):
                    heapq.heappush(pending, (now + first, 2, seq, (job, now, first)))
                    seq += 1
        if queue_wakes_at is not None:
            # the oldest waiting job starves by the queue's waits at a time that moves only
            # as jobs start: the controller's pass every second sees it; here one pass at
            # that instant, as the simulator
            oldest = next((j for k, j in trace_of.items() if not service.state.job(k).host), None)
            if oldest is not None:
                starving = queue_wakes_at(
                    oldest.submit, service.predictions.mean_wait(), settings.scheduler.predictive
                )
                if starving is not None and now < starving != queue_woken:
                    queue_woken = starving
                    heapq.heappush(pending, (starving, 3, seq, None))
                    seq += 1
    return decisions


def _next_expiry(payload: object, now: float) -> tuple[float, object] | None:
    """The next expiry of a running job's extended prediction, if it comes before its end."""
    job, began, first = payload  # type: ignore[misc]
    grown = extended(first, now - began, job.requested_time)
    if grown < executed_time(job) and began + grown > now:
        return began + grown, payload
    return None


@pytest.mark.parametrize(
    "policy", ["easy", "fairshare-group", "first-fit", "fcfs", "predictive", "fcfs,predictive"]
)
async def test_live_controller_decides_like_the_simulator(policy: str, tmp_path: Path) -> None:
    jobs = synthetic(150, max_procs=SLOTS, seed=11, mean_interarrival_s=40, underestimate=0)
    simulated = simulate(jobs, HOSTS, SLOTS, policy)
    live_decisions = await live(jobs, policy, tmp_path)
    assert len(simulated.decisions) == 150
    # the same starts; within one instant compare as sets (same pass, same placements)
    assert sorted(live_decisions) == sorted(simulated.decisions)


@pytest.mark.parametrize("seed", range(6))
async def test_predictive_live_equals_sim_on_random_small_workloads(
    seed: int, tmp_path: Path
) -> None:
    """Seeded random small workloads (sizes, users, arrival rates, requests that over- and
    underestimate, so predictions are extended and jobs killed at their request): the live
    controller's predictive pass starts what the simulator starts."""
    rng = random.Random(seed)
    jobs = synthetic(
        rng.randrange(20, 70),
        max_procs=SLOTS,
        seed=seed,
        mean_interarrival_s=rng.choice((5.0, 20.0, 60.0)),
        users=rng.randrange(1, 5),
        max_run_s=rng.choice((600.0, 7200.0)),
        underestimate=rng.choice((0.0, 0.2)),
    )
    simulated = simulate(jobs, HOSTS, SLOTS, "predictive")
    live_decisions = await live(jobs, "predictive", tmp_path)
    assert sorted(live_decisions) == sorted(simulated.decisions)


async def test_order_trust_live_equals_sim(tmp_path: Path) -> None:
    """`order_trust` changes the order's key, never with time: the live pass and the
    simulator still start the same jobs, and they are not the starts without it (so the
    setting reached both)."""
    jobs = synthetic(
        60, max_procs=SLOTS, seed=3, mean_interarrival_s=5.0, users=3, max_run_s=7200.0
    )
    trusting = PredictiveSettings(order_trust=1.0)
    simulated = simulate(jobs, HOSTS, SLOTS, "predictive", predictive=trusting)
    assert sorted(simulated.decisions) != sorted(
        simulate(
            jobs, HOSTS, SLOTS, "predictive", predictive=PredictiveSettings(order_trust=None)
        ).decisions
    )
    live_decisions = await live(jobs, "predictive", tmp_path, trusting)
    assert sorted(live_decisions) == sorted(simulated.decisions)


async def test_the_queue_wait_guard_live_equals_sim(tmp_path: Path) -> None:
    """The guard measured against the queue's waits (`wait_factor`) reads the history's
    average wait, fed at each start on both sides: the live pass and the simulator start
    the same jobs, and not those without it (so it fired, and on both)."""
    jobs = synthetic(
        80, max_procs=SLOTS, seed=5, mean_interarrival_s=5.0, users=3, max_run_s=7200.0
    )
    queued = PredictiveSettings(wait_factor=2.0, wait_min_s=0.0)
    simulated = simulate(jobs, HOSTS, SLOTS, "predictive", predictive=queued)
    without = PredictiveSettings(wait_factor=None)
    assert sorted(simulated.decisions) != sorted(
        simulate(jobs, HOSTS, SLOTS, "predictive", predictive=without).decisions
    )
    live_decisions = await live(jobs, "predictive", tmp_path, queued)
    assert sorted(live_decisions) == sorted(simulated.decisions)
