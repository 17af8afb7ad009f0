"""The Lublin-Feitelson workload model (xce/sched/sim/lublin.py): seeded, within the machine,
the model's bounds on run time, users who repeat their jobs, requests as users give them."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from xce.sched.sim.lublin import ROUND_REQUESTS_S, TOO_MUCH_TIME, lublin, main, request_for
from xce.sched.sim.swf import parse_swf


def test_a_seed_gives_one_trace() -> None:
    assert lublin(500, seed=3) == lublin(500, seed=3)
    assert lublin(500, seed=3) != lublin(500, seed=4)


def test_jobs_fit_the_machine_arrive_in_order_and_respect_the_models_bounds() -> None:
    jobs = lublin(2000, seed=1, max_procs=64)
    assert [j.number for j in jobs] == list(range(1, 2001))
    assert all(a.submit <= b.submit for a, b in itertools.pairwise(jobs))
    assert all(1 <= j.procs <= 64 for j in jobs)
    assert all(1 <= j.run_time <= math.exp(TOO_MUCH_TIME) for j in jobs)
    sizes = Counter(j.procs for j in jobs)
    assert sizes[1] > len(jobs) / 10  # many serial jobs
    powers = sum(n for p, n in sizes.items() if p & (p - 1) == 0)
    assert powers > len(jobs) / 2  # sizes are mostly powers of two


def test_without_estimates_there_is_no_request_and_one_user() -> None:
    jobs = lublin(300, seed=1)
    assert {j.requested_time for j in jobs} == {None}
    assert {j.user for j in jobs} == {"u0"}


def test_estimates_are_round_values_at_or_above_the_run_time() -> None:
    jobs = lublin(1000, seed=2, estimates=True)
    for job in jobs:
        assert job.requested_time in ROUND_REQUESTS_S
        assert job.requested_time >= min(job.run_time, ROUND_REQUESTS_S[-1])
    assert request_for(10.0, random.Random(1)) in ROUND_REQUESTS_S


def test_users_follow_zipf_and_repeat_their_last_job() -> None:
    jobs = lublin(3000, seed=1, users=20, repeat=0.5)
    counts = Counter(j.user for j in jobs)
    assert counts.most_common(1)[0][0] == "u0"  # the first user submits most
    last: dict[str, tuple[int, float]] = {}
    repeated = 0
    for job in jobs:
        before = last.get(job.user)
        if (
            before is not None
            and before[0] == job.procs
            and abs(job.run_time - before[1]) <= 0.1 * before[1] + 1
        ):
            repeated += 1
        last[job.user] = (job.procs, job.run_time)
    assert repeated > len(jobs) / 3


def test_load_compresses_the_arrivals() -> None:
    base, busy = lublin(1000, seed=1), lublin(1000, seed=1, load=2.0)
    assert busy[-1].submit < 0.75 * base[-1].submit


def test_the_command_prints_a_trace_xce_simulate_reads(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--jobs", "50", "--seed", "2", "--users", "5", "--estimates"])
    trace = parse_swf(capsys.readouterr().out.splitlines())
    assert len(trace.jobs) == 50 and trace.max_procs == 128
    assert trace.jobs == lublin(50, seed=2, users=5, estimates=True)
