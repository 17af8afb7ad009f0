"""The simulator's loop (`plan(..., explain=False)`) places exactly what the live pass
places, whatever the mix of queues: it only skips naming why the rest waits."""

from __future__ import annotations

import random

import pytest

from tests.unit.helpers import T0, new_state, submit, submit_array
from xce.core import events as ev
from xce.core.model import QueueRecord, ReservationRecord
from xce.core.state import ClusterState
from xce.sched.passes.pipeline import SchedulingPass, plan
from xce.sched.snapshot import snapshot_of

QUEUES = (
    QueueRecord("normal"),  # first-fit, no reservation: wide jobs skipped at once
    QueueRecord("bf", plugins=("backfill",)),
    QueueRecord("fair", priority=5, plugins=("fairshare", "backfill", "pack")),
    QueueRecord("strict", priority=-5, plugins=("strict",)),
    QueueRecord("capped", max_running_per_user=2),
)


def busy_cluster(rng: random.Random, queues: tuple[QueueRecord, ...]) -> ClusterState:
    state = new_state(
        queues=queues, hosts={f"h{i}": (rng.choice((4, 8, 16)), 64_000) for i in range(4)}
    )
    names = [q.name for q in queues]
    for _ in range(rng.randrange(3, 12)):  # some running jobs, with and without walltime
        job = submit(
            state,
            queue="normal",
            slots=rng.choice((1, 2, 4)),
            walltime_s=rng.choice((None, 300, 3600)),
        )
        host = f"h{rng.randrange(4)}"
        if (
            state.host_load.get(host) is None
            or state.host_load[host].slots + 4 <= state.hosts[host].slots
        ):
            state.apply(ev.JobStarted(T0 - rng.randrange(600), job, host))
    for _ in range(rng.randrange(20, 80)):
        queue = rng.choice(names)
        kw = {
            "slots": rng.choice((1, 2, 4, 8, 16, 32)),
            "walltime_s": rng.choice((None, 60, 600, 7200)),
            "user": f"u{rng.randrange(4)}",
        }
        if rng.random() < 0.1:
            submit_array(state, f"1-{rng.randrange(2, 6)}", queue=queue, **kw)
        else:
            submit(state, queue=queue, **kw)
    return state


@pytest.mark.parametrize("seed", range(40))
def test_quiet_and_explained_passes_place_alike(seed: int) -> None:
    rng = random.Random(seed)
    queues = tuple(q for q in QUEUES if q.name == "normal" or rng.random() < 0.6)
    state = busy_cluster(rng, queues)
    snapshot = snapshot_of(state)
    loud, quiet = plan(snapshot, T0), plan(snapshot, T0, explain=False)
    assert quiet.placements == loud.placements
    assert quiet.reservations == loud.reservations


def featured_cluster(rng: random.Random) -> ClusterState:
    """Hosts with attributes and GPUs, queues with and without limits, and jobs that take
    every route the quiet loop's quick one must leave to the full try: devices, licenses,
    -R (select, order, span), exclusive, memory, begin times, dependencies, arrays, held
    and plain jobs, some running."""
    queues = tuple(
        q
        for q in (
            QueueRecord("normal"),
            QueueRecord("bf", plugins=("backfill",)),
            QueueRecord("packed", priority=2, plugins=("pack",)),
            QueueRecord("strict", priority=-5, plugins=("strict",)),
            QueueRecord("capped", max_running=3),
            QueueRecord("fair", priority=1, plugins=("fairshare",)),
        )
        # queues that count running jobs (limits, fairshare) in a quarter of the clusters
        # each: the quiet loop's quick route is taken only without them
        if q.name == "normal" or rng.random() < (0.25 if q.name in ("capped", "fair") else 0.6)
    )
    state = new_state(queues=queues)
    for k in range(rng.randrange(2, 6)):
        gpus = (("gpu", ",".join(map(str, range(rng.choice((1, 2, 4)))))),)
        state.apply(
            ev.HostRegistered(
                T0,
                f"h{k}",
                rng.choice((4, 8, 16)),
                rng.choice((8_000, 64_000)),
                (("arch", rng.choice(("x86", "arm"))),),
                gpus if rng.random() < 0.5 else (),
            )
        )
    names = [q.name for q in queues]
    for _ in range(rng.randrange(2, 8)):
        job = submit(state, slots=rng.choice((1, 2)), walltime_s=rng.choice((None, 600)))
        state.apply(ev.JobStarted(T0 - 60, job, f"h{rng.randrange(2)}"))
    waiting: list[str] = []
    for _ in range(rng.randrange(20, 70)):
        kw: dict = {
            "slots": rng.choice((1, 2, 4, 8, 16, 24)),
            "walltime_s": rng.choice((None, 60, 3600)),
            "user": f"u{rng.randrange(3)}",
            "memory_mb": rng.choice((0, 0, 4_000, 32_000)),
        }
        roll = rng.random()
        if roll < 0.1:
            kw["gres"] = (("gpu", str(rng.choice((1, 2)))),)
        elif roll < 0.2:
            kw["licenses"] = (("matlab", "1"),)
        elif roll < 0.3:
            kw["resources"] = rng.choice(
                (
                    'select[arch=="arm"]',
                    "order[-slots]",
                    "span[ptile=2]",
                    "span[ptile=4]",
                    "select[slots>=4]",
                )
            )
        elif roll < 0.35:
            kw["exclusive"] = True
        elif roll < 0.4:
            kw["begin_time"] = T0 + rng.choice((-10, 600))
        elif roll < 0.45 and waiting:
            kw["dependency"] = f"afterok:{rng.choice(waiting)}"
        elif roll < 0.5:
            kw["hold"] = True
        queue = rng.choice(names)
        if rng.random() < 0.15:
            submit_array(state, f"1-{rng.randrange(2, 5)}%{rng.randrange(1, 3)}", queue=queue, **kw)
        else:
            waiting.append(submit(state, queue=queue, **kw))
    if rng.random() < 0.3:  # an advance reservation of one host, now or soon
        hosts = (f"h{rng.randrange(2)}",)
        start = T0 + rng.choice((-60, 300))
        record = ReservationRecord("maint", hosts, start, start + 3600, maintenance=True)
        state.apply(ev.ReservationAdded(T0, record))
    # array tasks that started and were requeued wait as jobs of their own (an index)
    for placed in plan(snapshot_of(state), T0).placements:
        if "[" in placed.job_id and rng.random() < 0.7:
            state.apply(ev.JobStarted(T0, placed.job_id, placed.host, placed.devices))
            state.apply(ev.JobRequeued(T0, placed.job_id))
    return state


@pytest.mark.parametrize("seed", range(80))
def test_quiet_and_explained_passes_place_alike_whatever_the_jobs_ask(seed: int) -> None:
    """The quiet loop's quick route (plain jobs) and its full tries give what the
    explained pass gives, with devices, licenses, -R, limits and gates in the mix."""
    rng = random.Random(seed)
    state = featured_cluster(rng)
    usage = {f"u{k}": rng.choice((0.0, 3600.0, 36000.0)) for k in range(3)}
    snapshot = snapshot_of(state, usage, licenses={"matlab": rng.choice((0, 1, 3))})
    loud, quiet = plan(snapshot, T0), plan(snapshot, T0, explain=False)
    assert quiet.placements == loud.placements
    assert quiet.reservations == loud.reservations


def test_a_requeued_array_task_keeps_to_its_arrays_limit_in_the_quiet_loop() -> None:
    """A requeued task waits as a job of its own (with an index) but counts against its
    array's limit: not a plain job for the quiet loop's quick route."""
    state = new_state(hosts={"h0": (16, 64_000)})
    number = submit_array(state, "1-3%1", slots=1)
    first = plan(snapshot_of(state), T0).placements
    assert [p.job_id for p in first] == [f"{number}[1]"]
    state.apply(ev.JobStarted(T0, first[0].job_id, "h0"))
    state.apply(ev.JobRequeued(T0, first[0].job_id))
    snapshot = snapshot_of(state)
    assert [job.index for job in snapshot.jobs] == [1]
    loud, quiet = plan(snapshot, T0), plan(snapshot, T0, explain=False)
    assert len(loud.placements) == 1  # the limit: one task at a time
    assert quiet.placements == loud.placements


@pytest.mark.parametrize("seed", range(20))
def test_the_quick_route_keys_shapes_as_the_full_try_does(seed: int) -> None:
    """The quick route builds its candidate sets' key inline: every key the quiet loop
    made is one the explained pass made too (`HostSearch.shape`), so both share the same sets."""
    rng = random.Random(seed)
    snapshot = snapshot_of(featured_cluster(rng))
    quiet, loud = SchedulingPass(snapshot, T0, explain=False), SchedulingPass(snapshot, T0)
    quiet.run(), loud.run()
    assert set(quiet.hosts.sets) <= set(loud.hosts.sets)
