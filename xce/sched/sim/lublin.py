"""The Lublin-Feitelson workload model (Lublin and Feitelson 2003, "The workload on parallel
supercomputers: modeling the characteristics of rigid jobs"), seeded, as SWF jobs.

The model gives each job an arrival time (gamma-distributed gaps, stretched and compressed
by a daily cycle of 48 half-hour buckets), a size (serial, power of two or other, from a
two-stage log-uniform) and a run time (a hyper-gamma in log-seconds whose mix depends on
the size), with separate parameters for interactive and batch jobs, as its authors' program
(m_lublin99.c) has them. It says nothing of users or requested times, which a scheduler
that predicts from users' history needs, so two small models are added and can be left out:

- users (`users` > 1): a job belongs to a user drawn by a Zipf law, and with probability
  `repeat` it repeats its user's last job (same size, run time within +-10 %): users in
  archive logs submit series of alike jobs (Feitelson's "repetitions"), which is what
  history-based prediction lives on;
- requested times (`estimates`): a job asks the first of the usual round values (5 min,
  15 min, 30 min, 1 h, 2 h, 4 h, 8 h, 12 h, 18 h, 24 h, 36 h, 48 h) at or above its run time
  times a factor drawn log-uniform from 1 to 10, and one job in five asks the longest
  (Tsafrir, Etsion and Feitelson 2005: estimates are few modal values, mostly far too high).
  Without estimates the requested time is -1: `xce simulate` then takes the run time as the
  request (perfect estimates) unless told `--no-estimate=infinite`.

`python -m xce.sched.sim.lublin --jobs 10000 --seed 1 [--users 1] [--estimates] [--load 1.0]`
prints the trace as SWF on stdout.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass

from xce.sched.sim.swf import SwfJob

INTERACTIVE, BATCH = 0, 1
BUCKETS = 48  # half hours of a day
SECONDS_IN_BUCKET = 86400 // BUCKETS
CYCLIC_DAY_START = 11  # the model's day runs 11:00 to 11:00
TOO_MUCH_TIME = 12.0  # log-seconds: no run time above exp(12), about two days
TOO_MUCH_ARRIVE_TIME = 13.0  # log-seconds: no gap above exp(13), about five days
ROUND_REQUESTS_S = (
    300,
    900,
    1800,
    3600,
    7200,
    14400,
    28800,
    43200,
    64800,
    86400,
    129600,
    172800,
)


@dataclass(frozen=True, slots=True)
class JobType:
    """The model's parameters of one job type (m_lublin99.c's constants)."""

    serial_prob: float
    pow2_prob: float
    u_low: float
    u_med: float
    u_hi: float
    u_prob: float
    a1: float
    b1: float
    a2: float
    b2: float
    pa: float
    pb: float
    aarr: float  # already times ARAR (rush hours to the whole day)
    barr: float
    anum: float
    bnum: float


TYPES = {
    INTERACTIVE: JobType(
        0.1541, 0.625, 1.0, 3.0, 5.5, 0.705,
        3.8351, 0.6605, 7.073, 0.6856, -0.0118, 0.9156,
        6.5510 * 0.9797, 0.6621, 8.9186, 3.6680,
    ),
    BATCH: JobType(
        0.2927, 0.6686, 1.2, 5.0, 7.0, 0.875,
        6.57, 0.823, 639.1, 0.0156, -0.003, 0.6986,
        6.0415 * 1.0519, 0.8531, 6.1271, 5.2740,
    ),
}  # fmt: skip


def _gamma_cdf(x: float, alpha: float, beta: float) -> float:
    """P(X <= x) for gamma(alpha, scale beta): the regularised lower incomplete gamma."""
    x /= beta
    if x <= 0:
        return 0.0
    if x < alpha + 1:  # series
        term = total = 1.0 / alpha
        a = alpha
        for _ in range(1000):
            a += 1
            term *= x / a
            total += term
            if term < total * 1e-10:
                break
        return total * math.exp(-x + alpha * math.log(x) - math.lgamma(alpha))
    # continued fraction (Lentz), for the upper tail
    tiny = 1e-300
    b = x + 1 - alpha
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - alpha)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-10:
            break
    return 1 - math.exp(-x + alpha * math.log(x) - math.lgamma(alpha)) * h


class _Arrivals:
    """The model's arrival process of one job type: gamma gaps in log-seconds, paid for in
    points that each half hour of the day charges by how busy it is."""

    def __init__(self, kind: JobType, rng: random.Random, load: float) -> None:
        self.kind, self.rng, self.load = kind, rng, load
        weights = [0.0] * BUCKETS
        for i in range(CYCLIC_DAY_START, BUCKETS + CYCLIC_DAY_START):
            weights[(i - 1) % BUCKETS] = _gamma_cdf(i + 0.5, kind.anum, kind.bnum) - _gamma_cdf(
                i - 0.5, kind.anum, kind.bnum
            )
        mean = sum(weights) / BUCKETS
        self.weights = [w / mean for w in weights]
        self.bucket = 0  # the day starts at midnight
        self.points = 0.0
        self.remainder = 0.0
        self.time = 0.0
        self.advance()

    def advance(self) -> None:
        """The next job of this type's arrival time (`time`)."""
        kind, rng, weights = self.kind, self.rng, self.weights
        while True:
            gap = rng.gammavariate(kind.aarr, kind.barr)
            if gap <= TOO_MUCH_ARRIVE_TIME:
                break
        self.points += math.exp(gap) / self.load / SECONDS_IN_BUCKET
        elapsed = 0.0
        bucket = self.bucket
        while self.points > weights[bucket]:
            self.points -= weights[bucket]
            bucket = (bucket + 1) % BUCKETS
            elapsed += SECONDS_IN_BUCKET
        remainder = self.points / weights[bucket]
        elapsed += SECONDS_IN_BUCKET * (remainder - self.remainder)
        self.remainder = remainder
        self.bucket = bucket
        self.time += elapsed


def _size(kind: JobType, rng: random.Random, max_procs: int) -> int:
    u = rng.random()
    if u <= kind.serial_prob:
        return 1
    low, high = (kind.u_low, kind.u_med) if rng.random() <= kind.u_prob else (kind.u_med, kind.u_hi)
    exponent = rng.uniform(low, high)
    if u <= kind.serial_prob + kind.pow2_prob:
        exponent = float(int(exponent + 0.5))
    return max(1, min(max_procs, int(2**exponent + 0.5)))


def _run_time(kind: JobType, rng: random.Random, procs: int) -> int:
    p = min(1.0, max(0.0, kind.pa * procs + kind.pb))
    while True:
        a, b = (kind.a1, kind.b1) if rng.random() <= p else (kind.a2, kind.b2)
        value = rng.gammavariate(a, b)
        if value <= TOO_MUCH_TIME:
            return max(1, int(math.exp(value)))


def request_for(run_s: float, rng: random.Random) -> int:
    """A requested time as users give them: a round value, mostly far above the run."""
    if rng.random() < 0.2:
        return ROUND_REQUESTS_S[-1]
    wanted = run_s * math.exp(rng.uniform(0.0, math.log(10.0)))
    for value in ROUND_REQUESTS_S:
        if value >= wanted:
            return value
    return ROUND_REQUESTS_S[-1]


def lublin(
    count: int,
    seed: int = 1,
    max_procs: int = 128,
    users: int = 1,
    estimates: bool = False,
    load: float = 1.0,
    repeat: float = 0.5,
) -> list[SwfJob]:
    """`count` jobs of the model on a machine of `max_procs` (128 in the model); `load`
    compresses the gaps between arrivals (2.0: twice as many jobs per hour)."""
    rng = random.Random(seed)
    streams = {t: _Arrivals(kind, rng, load) for t, kind in TYPES.items()}
    zipf = [1.0 / (k + 1) for k in range(users)]
    last: dict[int, tuple[int, int]] = {}  # user -> (procs, run) of their last job
    jobs: list[SwfJob] = []
    for number in range(1, count + 1):
        kind_of = min(streams, key=lambda t: (streams[t].time, t))
        stream = streams[kind_of]
        submit = stream.time
        stream.advance()
        kind = TYPES[kind_of]
        user = rng.choices(range(users), zipf)[0] if users > 1 else 0
        previous = last.get(user)
        if users > 1 and previous is not None and rng.random() < repeat:
            procs = previous[0]
            run = max(1, int(previous[1] * rng.uniform(0.9, 1.1)))
        else:
            procs = _size(kind, rng, max_procs)
            run = _run_time(kind, rng, procs)
        last[user] = (procs, run)
        jobs.append(
            SwfJob(
                number,
                float(int(submit)),
                float(run),
                procs,
                request_for(run, rng) if estimates else None,
                f"u{user}",
                "g0",
            )
        )
    return jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--procs", type=int, default=128, help="machine size (MaxProcs)")
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--estimates", action="store_true", help="add requested times")
    parser.add_argument("--load", type=float, default=1.0, help="arrival rate multiplier")
    args = parser.parse_args(argv)
    jobs = lublin(args.jobs, args.seed, args.procs, args.users, args.estimates, args.load)
    out = sys.stdout
    out.write("; Lublin-Feitelson model (xce.sched.sim.lublin)\n")
    out.write(
        f"; jobs={args.jobs} seed={args.seed} users={args.users} "
        f"estimates={args.estimates} load={args.load}\n"
    )
    out.write(f"; MaxJobs: {args.jobs}\n; MaxProcs: {args.procs}\n")
    for job in jobs:
        out.write(job.to_line() + "\n")


if __name__ == "__main__":
    main()
