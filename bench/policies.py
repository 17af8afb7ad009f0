"""`python -m bench.policies [--trace FILE.swf ...] [--seeds N] [--jobs N]`: what the
`predictive` policy gains over EASY, and who pays, on the traces the project has.

For each trace, EASY (`backfill`) and each policy asked (`predictive` by default) replay it
through `xce simulate`'s engine, and one row per policy gives the four figures the policy is
judged by: average bounded slowdown (tau 10 s), utilisation, maximum wait and average wait,
each beside EASY's, and the targets they meet (slowdown at least 50 % below EASY's,
utilisation at most 0.5 points below, maximum wait at most 1.5x, average wait not above).

Traces: the Lublin-Feitelson model (xce/sched/sim/lublin.py) with and without requested
times, several seeds each (the figures are the medians over the seeds; the ratios are those
of the medians), and any archive trace named with `--trace` (the Parallel Workloads Archive's
SWF files; one machine of MaxProcs slots, `xce simulate`'s conventions). A synthetic trace
goes through SWF text and back, so `python -m xce.sched.sim.lublin --jobs N --seed S
[--users 50 --estimates] [--load L] > t.swf; xce simulate t.swf -p easy -p predictive`
gives the same figures for one seed.

`--set KEY=VALUE` changes a `[scheduler.predictive]` setting for the policies compared with
EASY (`--set order_trust=4`, `--set guard_factor=2`; `--set wait_factor=none` unsets a key),
so each alternative of docs/performance.md is one command.

A job's bounded slowdown is never below 1 (it cannot run before it is submitted), so where
EASY's average is under 2 the slowdown target cannot be met by any policy: the row says so
and gives the best ratio there is (1 / EASY's average), which no job waiting at all reaches.

The replays are deterministic: the figures are decisions, not timings, and do not depend on
the machine (the run takes a few seconds per trace).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from xce.config.scheduler import PredictiveSettings
from xce.sched.sim.lublin import lublin
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfJob, parse_swf, read_swf, write_swf

BASELINE = "easy"
# (label, users, estimates, load) of the synthetic traces
LUBLIN: tuple[tuple[str, int, bool, float], ...] = (
    ("Lublin, 50 users, estimates, load 1.0", 50, True, 1.0),
    ("Lublin, 50 users, estimates, load 1.5", 50, True, 1.5),
    ("Lublin, 50 users, no estimates, load 1.5", 50, False, 1.5),
    ("Lublin, 1 user, no estimates, load 1.0", 1, False, 1.0),
)
LUBLIN_PROCS = 128


@dataclass(frozen=True)
class Figures:
    """What one replay gives: the four figures a policy is judged by."""

    slowdown: float  # average bounded slowdown, tau 10 s
    utilisation: float  # 0..1
    max_wait_s: float
    avg_wait_s: float

    @classmethod
    def median(cls, runs: Sequence[Figures]) -> Figures:
        return cls(
            statistics.median(r.slowdown for r in runs),
            statistics.median(r.utilisation for r in runs),
            statistics.median(r.max_wait_s for r in runs),
            statistics.median(r.avg_wait_s for r in runs),
        )


def figures(
    jobs: list[SwfJob], slots: int, policy: str, settings: PredictiveSettings | None = None
) -> Figures:
    """`policy` replayed over `jobs` on one machine of `slots` slots (`settings`: the
    `[scheduler.predictive]` it reads; None: the defaults)."""
    result = simulate(jobs, 1, slots, policy, predictive=settings)
    metrics = result.metrics()
    max_wait = max((o.wait for o in result.done()), default=0.0)
    return Figures(
        metrics["avg_bounded_slowdown"],
        metrics["utilisation"],
        max_wait,
        metrics["avg_wait_s"],
    )


def targets_missed(mine: Figures, easy: Figures) -> list[str]:
    """The targets `mine` misses against EASY's figures (empty: all four met)."""
    missed = []
    if mine.slowdown > 0.5 * easy.slowdown:
        missed.append("slowdown")
    if mine.utilisation < easy.utilisation - 0.005:
        missed.append("utilisation")
    if mine.max_wait_s > 1.5 * easy.max_wait_s:
        missed.append("max wait")
    if mine.avg_wait_s > easy.avg_wait_s:
        missed.append("avg wait")
    return missed


def unreachable(missed: list[str], easy: Figures) -> str:
    """`missed` as the table shows it: a slowdown target no policy can meet (EASY's average
    under 2, and none can go below 1) is marked so, with the best ratio there is."""
    shown = []
    for target in missed:
        if target == "slowdown" and easy.slowdown < 2.0:
            target = f"slowdown (unreachable: best {1.0 / easy.slowdown:.2f}x)"
        shown.append(target)
    return ", ".join(shown)


def synthetic(count: int, seed: int, users: int, estimates: bool, load: float) -> list[SwfJob]:
    """A Lublin-Feitelson trace as `xce simulate` reads it from SWF (no estimate: the run
    time is the request)."""
    jobs = lublin(count, seed, LUBLIN_PROCS, users, estimates, load)
    text = write_swf(jobs, {"MaxProcs": str(LUBLIN_PROCS)})
    return parse_swf(text.splitlines()).jobs


def _ratio(mine: float, easy: float) -> str:
    return f"{mine / easy:.2f}x" if easy else "-"


def _wait(seconds: float) -> str:
    if seconds < 600:
        return f"{seconds:,.0f} s"
    if seconds < 36000:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def rows_for(label: str, runs: dict[str, Figures]) -> list[list[str]]:
    easy = runs[BASELINE]
    out = []
    for policy, mine in runs.items():
        base = policy == BASELINE
        missed = [] if base else targets_missed(mine, easy)
        out.append(
            [
                label,
                policy,
                f"{mine.slowdown:,.2f}",
                "" if base else _ratio(mine.slowdown, easy.slowdown),
                f"{mine.utilisation * 100:.2f} %",
                "" if base else f"{(mine.utilisation - easy.utilisation) * 100:+.2f}",
                _wait(mine.max_wait_s),
                "" if base else _ratio(mine.max_wait_s, easy.max_wait_s),
                _wait(mine.avg_wait_s),
                "" if base else _ratio(mine.avg_wait_s, easy.avg_wait_s),
                ""
                if base
                else ("all met" if not missed else "missed: " + unreachable(missed, easy)),
            ]
        )
        label = ""
    return out


HEAD = [
    "trace",
    "policy",
    "avg bsld",
    "vs EASY",
    "util",
    "points",
    "max wait",
    "vs EASY",
    "avg wait",
    "vs EASY",
    "targets (bsld <= 0.5x, util >= -0.5, max <= 1.5x, avg <= 1x)",
]


def table(rows: list[list[str]]) -> str:
    cells = [HEAD, *rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEAD))]
    lines = []
    for i, row in enumerate(cells):
        lines.append(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def run(
    policies: Sequence[str],
    seeds: Sequence[int],
    count: int,
    traces: Sequence[Path],
    echo: Callable[[str], None] = print,
    settings: PredictiveSettings | None = None,
) -> list[list[str]]:
    """Every row of the table; `echo` hears of each trace as it starts (stderr); `settings`
    are those of the policies compared with EASY (which reads none)."""
    asked = [BASELINE, *(p for p in policies if p != BASELINE)]
    rows: list[list[str]] = []
    for label, users, estimates, load in LUBLIN:
        echo(f"{label}: seeds {', '.join(map(str, seeds))}")
        per_seed: dict[str, list[Figures]] = {p: [] for p in asked}
        for seed in seeds:
            jobs = synthetic(count, seed, users, estimates, load)
            for policy in asked:
                per_seed[policy].append(figures(jobs, LUBLIN_PROCS, policy, settings))
        shown = f"{label} ({count:,} jobs, median of {len(seeds)} seeds)"
        rows += rows_for(shown, {p: Figures.median(f) for p, f in per_seed.items()})
    for path in traces:
        echo(str(path))
        trace = read_swf(path)
        slots = trace.max_procs or max(j.procs for j in trace.jobs)
        shown = f"{path.name} ({len(trace.jobs):,} jobs, {slots} slots)"
        rows += rows_for(shown, {p: figures(trace.jobs, slots, p, settings) for p in asked})
    return rows


def predictive_settings(pairs: Sequence[str]) -> PredictiveSettings | None:
    """`[scheduler.predictive]` from `--set KEY=VALUE` pairs, checked as the config file's
    table is (None: none given, the defaults)."""
    if not pairs:
        return None
    values: dict[str, float | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set wants KEY=VALUE, not {pair!r}")
        # `none` unsets a key (what TOML cannot write): the settings before a default
        values[key.strip()] = None if value.strip().lower() == "none" else float(value)
    try:
        return msgspec.convert(values, PredictiveSettings)
    except msgspec.ValidationError as err:
        raise ValueError(f"--set: {err}") from err


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.policies", description=__doc__)
    parser.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="an archive trace in SWF (.gz allowed); repeatable",
    )
    parser.add_argument(
        "--policy",
        "-p",
        action="append",
        default=[],
        help="a policy to compare with EASY (xce simulate's -p); repeatable; default: predictive",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [scheduler.predictive] setting of the policies compared (VALUE none: unset); "
        "repeatable",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per synthetic trace")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per synthetic trace")
    args = parser.parse_args(argv)
    try:
        settings = predictive_settings(args.set)
    except ValueError as err:
        parser.error(str(err))
    rows = run(
        args.policy or ["predictive"],
        range(1, args.seeds + 1),
        args.jobs,
        args.trace,
        lambda line: print(line, file=sys.stderr, flush=True),
        settings,
    )
    print(table(rows))


if __name__ == "__main__":
    main()
