"""A small synthetic workload generator (in the spirit of Lublin and Feitelson 2003, much
simplified) for tests and benchmarks: Poisson arrivals, power-of-two job sizes, log-uniform
run times, requested times that overestimate (and now and then underestimate) run times.
Deterministic for a given seed.
"""

from __future__ import annotations

import math
import random

from xce.sched.sim.swf import SwfJob


def synthetic(
    count: int,
    max_procs: int,
    seed: int = 1,
    mean_interarrival_s: float = 60.0,
    users: int = 8,
    groups: int = 3,
    max_run_s: float = 7200.0,
    underestimate: float = 0.05,
) -> list[SwfJob]:
    """`count` jobs for a machine of `max_procs` slots per host."""
    rng = random.Random(seed)
    sizes = [2**k for k in range(int(math.log2(max_procs)) + 1)]
    weights = [1.0 / (k + 1) for k in range(len(sizes))]  # small jobs are the most common
    jobs = []
    now = 0.0
    for number in range(1, count + 1):
        now += rng.expovariate(1.0 / mean_interarrival_s)
        run = round(math.exp(rng.uniform(math.log(10), math.log(max_run_s))))
        if rng.random() < underestimate:
            requested = max(1, int(run * rng.uniform(0.3, 0.9)))  # will be killed
        else:
            requested = int(run * rng.uniform(1.0, 3.0)) + 1
        user = rng.randrange(users)
        jobs.append(
            SwfJob(
                number,
                round(now),
                float(run),
                rng.choices(sizes, weights)[0],
                requested,
                f"u{user}",
                f"g{user % groups}",
            )
        )
    return jobs
