"""The simulator's loop (`plan(..., explain=False)`) places exactly what the live pass
places, whatever the mix of queues: it only skips naming why the rest waits."""

from __future__ import annotations

import random

import pytest

from tests.unit.helpers import T0, new_state, submit, submit_array
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched.pipeline import plan
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
