"""The cluster history ring: exact figures per step from the applied events, bounded at any
uptime and whatever the cluster's size, coarser steps aggregated as a coarser ring would
sample, and the same figures rebuilt from the durable records after a restart or failover
(with the accounting store, and from the held jobs alone without one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xce.accounting.feed import AccountingFeed
from xce.config.settings import ControllerSettings
from xce.controller.cluster_history import FIELDS, ClusterHistory
from xce.controller.requests import FinishReport, SubmitRequest, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.store.files import FileStore

STEP = 60
T0 = 1000.0 * STEP  # a boundary: every figure below is relative to it


class Cluster:
    """A service on a hand-moved clock with a ring observing its applier, as compose does."""

    def __init__(self, tmp_path: Path, accounting: bool = False) -> None:
        self.now = T0
        settings = ControllerSettings(
            state_dir=tmp_path, queues=(QueueRecord("normal"), QueueRecord("short"))
        )
        self.service = ControllerService(
            settings, FileStore(tmp_path / "f", 1 << 20), clock=lambda: self.now
        )
        self.feed: AccountingFeed | None = None
        if accounting:
            self.feed = AccountingFeed(tmp_path, clock=lambda: self.now)
            self.feed.start()
            self.service.accounting = self.feed
        self.history = ClusterHistory(self.service.state, STEP, lambda: self.now)
        self.service.applier.observers = (*self.service.applier.observers, self.history)
        self.gateway = WorkerGateway(self.service)

    async def setup(self) -> None:
        await self.service.commit(
            [ev.QueueCreated(self.now, q) for q in self.service.settings.queues]
        )
        await self.gateway.register(WorkerInfo("h", 4, 4000))

    async def submit(self, slots: int = 2, queue: str = "normal") -> str:
        req = SubmitRequest.from_fields(user="alice", command="x", slots=slots, queue=queue)
        return await self.service.submit(req)

    async def finish(self, job_id: str) -> None:
        job = self.service.state.job(job_id)
        assert await self.gateway.finished("h", FinishReport(job_id, job.attempt, 0))


def figures(samples: list[dict[str, Any]], *names: str) -> list[tuple[int, ...]]:
    return [tuple(s[n] for n in names) for s in samples]


async def _three_steps(c: Cluster) -> tuple[str, str, str]:
    """Step 1: three jobs submitted, two start, one waits. Step 2: the first ends and the
    waiting one starts. Step 3: the second ends."""
    await c.setup()
    c.now = T0 + 10
    a, b, w = await c.submit(), await c.submit(), await c.submit()
    assert await c.service.schedule_once() == 2
    c.now = T0 + STEP + 10
    await c.finish(a)
    c.now = T0 + STEP + 15
    assert await c.service.schedule_once() == 1
    c.now = T0 + 2 * STEP + 10
    await c.finish(b)
    c.now = T0 + 3 * STEP + 1
    c.history.tick()
    return a, b, w


RUN_PEND_SLOTS = ("running", "pending", "slots_busy", "slots_total", "submitted", "finished")
EXPECTED = [(2, 1, 4, 4, 3, 0), (2, 0, 4, 4, 0, 1), (1, 0, 2, 4, 0, 1)]


async def test_each_step_holds_the_figures_at_its_boundary_and_the_counts_within_it(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    await _three_steps(c)
    samples = c.history.samples()
    assert [s["t"] - T0 for s in samples] == [STEP, 2 * STEP, 3 * STEP]
    assert figures(samples, *RUN_PEND_SLOTS) == EXPECTED
    assert set(samples[0]) == {"t", *FIELDS}
    # one queue's series; the other queue's is all zero but for its hosts
    assert figures(c.history.samples(queue="normal"), *RUN_PEND_SLOTS) == EXPECTED
    assert figures(c.history.samples(queue="short"), *RUN_PEND_SLOTS) == [(0, 0, 0, 4, 0, 0)] * 3
    assert c.history.samples(queue="nope") == []
    assert c.history.current()[""]["running"] == 1
    assert (c.history.submitted_total, c.history.finished_total) == (3, 2)
    # only the last two minutes' samples
    assert figures(c.history.samples(minutes=2), *RUN_PEND_SLOTS) == EXPECTED[1:]


async def test_a_coarser_step_takes_the_gauges_at_its_boundary_and_sums_the_counters(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    await _three_steps(c)
    coarse = c.history.samples(step=2 * STEP)
    # boundaries T0+120 (samples T0+60 and T0+120) and T0+240, not reached yet: left out
    assert [s["t"] - T0 for s in coarse] == [2 * STEP]
    assert figures(coarse, *RUN_PEND_SLOTS) == [(2, 0, 4, 4, 3, 1)]


async def test_the_ring_stays_the_same_size_at_any_uptime_and_any_cluster_size(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    await c.setup()
    size = c.history.size
    assert size * STEP >= 86_400  # at least a day
    bytes_before = c.history.cluster.values.buffer_info()[1]
    await c.service.commit(
        [ev.HostRegistered(c.now, f"n{i:05}", 64, 256_000) for i in range(10_000)]
    )
    for day in range(1, 4):  # three days of ticks, one per step
        for k in range(0, 86_400, STEP):
            c.history.tick(T0 + (day - 1) * 86_400 + k + STEP)
    assert len(c.history.samples()) == size
    assert c.history.cluster.values.buffer_info()[1] == bytes_before
    assert set(c.history.queues) == {"normal", "short"}
    assert c.history.samples()[-1]["slots_total"] == 4 + 10_000 * 64
    assert len(c.history._open) == 0


async def test_an_event_stamped_before_a_closed_boundary_corrects_that_sample(
    tmp_path: Path,
) -> None:
    """A scheduling pass that read the clock before a boundary and committed after it."""
    c = Cluster(tmp_path)
    await c.setup()
    c.now = T0 + 10
    job = await c.submit()
    c.history.tick(T0 + STEP + 1)  # the boundary closes: the job still waits
    assert figures(c.history.samples(), "running", "pending") == [(0, 1)]
    await c.service.commit([ev.JobStarted(T0 + 20, job, "h")])  # stamped before it
    assert figures(c.history.samples(), "running", "pending", "slots_busy") == [(1, 0, 2)]


@pytest.mark.parametrize("accounting", [True, False], ids=["accounting-store", "held-jobs"])
async def test_a_new_term_rebuilds_the_same_figures_from_the_durable_records(
    tmp_path: Path, accounting: bool
) -> None:
    c = Cluster(tmp_path, accounting=accounting)
    await _three_steps(c)
    live = c.history.samples()
    # A restart or a failover: a new ring over the recovered state, the clock later on
    c.now = T0 + 3 * STEP + 30
    again = ClusterHistory(c.service.state, STEP, lambda: c.now)
    assert again.samples() == [] and not again.rebuilt
    await again.rebuild(c.feed)
    assert again.rebuilt
    assert again.samples() == live
    assert again.samples(queue="normal") == c.history.samples(queue="normal")
    # and it goes on from there: this term counts its own events only
    assert (again.submitted_total, again.finished_total) == (0, 0)
    if c.feed is not None:
        c.feed.close()


async def test_the_step_the_new_term_started_in_keeps_what_happened_before_the_start(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    await c.setup()
    c.now = T0 + 10
    await c.submit()
    c.now = T0 + 20  # the controller restarts within the step
    again = ClusterHistory(c.service.state, STEP, lambda: c.now)
    await again.rebuild(None)
    c.now = T0 + STEP + 1
    again.tick()
    assert figures(again.samples(), "pending", "submitted") == [(1, 1)]


def test_a_bad_event_never_fails_the_commit_it_rides_on() -> None:
    state = ClusterState()
    history = ClusterHistory(state, STEP, lambda: T0)
    event = ev.QueueCreated(T0, QueueRecord("normal"))
    history._pre = [("x", 1, 0, 0, 0, False)]  # left over, as if a fault had hit before
    history.before(state, event)
    state.apply(event)
    history.after(state, event, 1)
    assert history.current()[""]["pending"] == 0


def test_a_step_below_one_second_is_refused() -> None:
    with pytest.raises(ValueError):
        ClusterHistory(ClusterState(), 0, lambda: T0)
