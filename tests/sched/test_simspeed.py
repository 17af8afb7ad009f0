"""The simulator skips a pass that cannot start anything (no pending job fits in
any host's free slots) and still decides exactly as before (same starts as the reference
simulator of bench/refsim.py, checked broadly in test_refsim_guard.py)."""

from __future__ import annotations

import pytest

from bench.refsim import refsim
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfJob
from xce.sched.sim.workload import synthetic


def _jobs() -> list[SwfJob]:
    # 4 slots: job 1 takes 3; jobs 2 (2 slots) and 3 (4 slots) cannot start while it runs
    return [
        SwfJob(1, 0.0, 100.0, 3, None, "u1", "g1"),
        SwfJob(2, 10.0, 50.0, 2, None, "u2", "g1"),
        SwfJob(3, 20.0, 10.0, 4, None, "u3", "g1"),
    ]


@pytest.mark.parametrize("policy", ["fcfs", "first-fit", "easy", "fairshare"])
def test_pass_skipped_when_nothing_fits(policy: str) -> None:
    result = simulate(_jobs(), hosts=1, slots=4, policy=policy)
    assert {o.job.number: o.start for o in result.outcomes} == {1: 0.0, 2: 100.0, 3: 150.0}
    # passes at 0, 100 and 150 only: at 10 and 20 one slot is free, every job needs more
    assert result.passes == 3


@pytest.mark.parametrize("policy", ["first-fit", "easy"])
def test_wide_job_needs_a_whole_free_host(policy: str) -> None:
    """A job wider than a host needs a whole free host: the skip's lower bound holds."""
    jobs = [
        SwfJob(1, 0.0, 100.0, 3, None, "u1", "g1"),
        SwfJob(2, 0.0, 100.0, 2, None, "u1", "g1"),
        SwfJob(3, 5.0, 10.0, 6, None, "u2", "g1"),
    ]
    result = simulate(jobs, hosts=2, slots=4, policy=policy)
    starts = {o.job.number: o.start for o in result.outcomes}
    assert starts == {1: 0.0, 2: 0.0, 3: 100.0}
    assert result.passes == 2  # at 0 and 100: at 5 the freest host has 2 of 4 slots


@pytest.mark.parametrize("policy", ["fcfs", "first-fit", "easy", "fairshare"])
def test_same_starts_as_reference_multi_host(policy: str) -> None:
    jobs = synthetic(400, max_procs=8, seed=11, mean_interarrival_s=15)
    result = simulate(jobs, hosts=4, slots=8, policy=policy)
    assert {o.job.number: o.start for o in result.outcomes} == refsim(jobs, 4, 8, policy).starts


def test_strict_fcfs_skips_pass_while_head_does_not_fit() -> None:
    """Under strict FCFS a job that fits waits behind a head that does not: no pass runs
    until the head can start (or the pass would place nothing)."""
    jobs = [
        SwfJob(1, 0.0, 100.0, 3, None, "u1", "g1"),
        SwfJob(2, 10.0, 50.0, 4, None, "u2", "g1"),
        SwfJob(3, 20.0, 5.0, 1, None, "u3", "g1"),
    ]
    result = simulate(jobs, hosts=1, slots=4, policy="fcfs")
    starts = {o.job.number: o.start for o in result.outcomes}
    assert starts == {1: 0.0, 2: 100.0, 3: 150.0} == refsim(jobs, 1, 4, "fcfs").starts
    assert result.passes == 3  # at 0, 100 and 150; not at 20, where job 3 would fit
