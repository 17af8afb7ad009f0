"""Correctness guard: `xce simulate` (the live pipeline, with its incremental snapshot and
the pass that stops early) gives every job the same start time as the minimal reference
simulator in bench/refsim.py, which shares no code with it.

Traces are synthetic: small, and busy enough that hundreds of jobs wait (long queues, where
the incremental paths matter); on one host and on several (host choice, reservations on
one host of many); with and without jobs killed at their requested time.
"""

from __future__ import annotations

import pytest

from bench.refsim import refsim
from xce.sched.sim.simulate import simulate
from xce.sched.sim.workload import synthetic

CASES = [  # (jobs, hosts, slots per host, mean interarrival s, seed)
    (300, 1, 16, 300.0, 1),  # light load: short queues
    (1200, 1, 64, 20.0, 2),  # overloaded: the queue grows to hundreds of jobs
    (800, 4, 16, 15.0, 3),  # several hosts, long queue
]


@pytest.mark.parametrize("policy", ["fcfs", "easy", "first-fit", "fairshare"])
@pytest.mark.parametrize(("count", "hosts", "slots", "interarrival", "seed"), CASES)
def test_same_waits_as_the_reference(
    policy: str, count: int, hosts: int, slots: int, interarrival: float, seed: int
) -> None:
    jobs = synthetic(count, max_procs=slots, seed=seed, mean_interarrival_s=interarrival)
    ours = simulate(jobs, hosts, slots, policy)
    ref = refsim(jobs, hosts, slots, policy)
    waits = {o.job.number: o.start - o.job.submit for o in ours.outcomes if o.start is not None}
    ref_waits = {j.number: ref.starts[j.number] - j.submit for j in jobs if j.number in ref.starts}
    assert len(waits) == count
    assert waits == ref_waits
    if interarrival < 100:  # the case is meant to build a long queue: check it did
        assert max(waits.values()) > 50 * interarrival


def test_the_guard_can_fail() -> None:
    """A different policy gives different waits on a busy trace, so equality above is not
    vacuous."""
    jobs = synthetic(400, max_procs=16, seed=4, mean_interarrival_s=20)
    fcfs = simulate(jobs, 1, 16, "fcfs")
    ref_easy = refsim(jobs, 1, 16, "easy")
    assert {o.job.number: o.start for o in fcfs.outcomes} != ref_easy.starts
