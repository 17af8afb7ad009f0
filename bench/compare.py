"""This checkout against a baseline commit, side by side in one run:
`python -m bench.compare --baseline REV [--figures submit,pass,simulate,recovery]`.

Figure 2, the submit path:
The same load (`bench.controller`: N clients POSTing /api/v1/jobs, `wal_fsync = "interval"`
by default, the CPU ceiling) is driven against a controller started from this checkout and
against one started from commit REV (unpacked with `git archive`, run with PYTHONPATH and
working directory on that tree). Runs alternate ABBA (baseline, this, this, baseline, ...) so
that a drift in the machine's load hits both sides alike. It prints, for each side, the median
jobs/s and the median controller CPU per acknowledged submit (user + system of the controller
process over the window, divided by the submits: on a shared machine the clients and other
processes compete for the cores, so CPU per request is the steadier measure of the request
path's cost), with the ratios this / baseline.

The pass, the simulator and recovery are timed the same way, ABBA, each side in a process of
its own started in its own tree (so each runs its own `bench` helpers against its own `xce`):
one scheduling pass over 100k pending jobs x 10k hosts with EASY backfill and resource
expressions (`bench.sched`), `xce simulate` of a synthetic SWF trace under EASY and
fairshare, and `recover()` of a 100k-job state with a checkpoint in the middle of its WAL
(`bench.recovery`). Each prints the median process CPU seconds per side and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import Plan, median, source_tree, spread
from bench.controller import Load, measure

FIGURES = ("submit", "pass", "simulate", "recovery")

# Run in each side's own tree (cwd and PYTHONPATH): prints one JSON object with `cpu_s`.
PROBES = {
    "pass": """
import json
from bench.sched import cluster, timed
snap = cluster(100_000, 10_000, ("backfill",), True)
wall, cpu, placed = timed(snap, 3)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "placed": placed}))
""",
    "recovery": """
import json, sys, tempfile
from pathlib import Path
from bench.common import build_state
from bench.recovery import _recover_once, write_scenario
state = build_state(100_000)
expected = len(state.jobs) + 20_000
with tempfile.TemporaryDirectory(dir=sys.argv[1]) as tmp:
    write_scenario(state, Path(tmp), 20_000, 20_000)
    del state
    runs = [_recover_once(Path(tmp), expected, 20_000) for _ in range(3)]
runs.sort(key=lambda r: r["cpu_s"])
print(json.dumps({"cpu_s": runs[1]["cpu_s"], "wall_s": runs[1]["seconds"]}))
""",
    "simulate": """
import json, resource, subprocess, sys
argv = [sys.executable, "-m", "xce", "simulate", sys.argv[1], "--hosts", "64", "--slots", "16",
        "-p", "easy", "-p", "fairshare"]
subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime}))
""",
}


@dataclass
class Side:
    """One tree's runs."""

    label: str
    tree: Path | None
    runs: list[Load] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return median([r.jobs_per_s for r in self.runs])

    @property
    def cpu_us(self) -> float:
        return median([r.cpu_us_per_job for r in self.runs])

    def line(self) -> str:
        rates = [r.jobs_per_s for r in self.runs]
        cpus = [r.cpu_us_per_job for r in self.runs]
        mid = sorted(self.runs, key=lambda r: r.jobs_per_s)[len(self.runs) // 2]
        errors = sum(r.errors for r in self.runs)
        return (
            f"{self.label:<28} {self.rate:>8,.0f} jobs/s ({spread(rates)})  "
            f"{self.cpu_us:>6,.0f} us CPU/job ({spread(cpus)})  "
            f"p50 {mid.p50_ms:.1f} p99 {mid.p99_ms:.0f} ms  ctl cpu {mid.controller_cpu:.0%} "
            f"cli {mid.client_cpu:.0%}" + (f"  {errors} errors" if errors else "")
        )


def compare(plan: Plan, clients: int, fsync: str, sides: tuple[Side, Side]) -> None:
    """Alternate the two sides ABBA for `plan.http_runs` runs each."""
    for run_no in range(plan.http_runs):
        order = sides if run_no % 2 == 0 else sides[::-1]
        for side in order:
            tag = "-base" if side.tree is not None else "-this"
            load = measure(plan, clients, fsync, run_no, side.tree, tag)
            side.runs.append(load)
            print(
                f"  run {run_no + 1} {side.label}: {load.jobs_per_s:,.0f} jobs/s, "
                f"{load.cpu_us_per_job:,.0f} us CPU/job",
                file=sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def _baseline(rev: str | None, tree: Path | None, tmp: Path) -> Iterator[tuple[Path, str]]:
    """(the baseline's tree, its label): commit `rev` unpacked, or the directory `tree`."""
    if tree is not None:
        if not (tree / "xce" / "__init__.py").exists():
            raise SystemExit(f"{tree} holds no xce package")
        yield tree.resolve(), str(tree)
        return
    assert rev is not None
    with source_tree(rev, tmp) as (path, commit):
        yield path, commit[:10]


def _probe(figure: str, tree: Path | None, tmp: Path, trace: Path) -> float:
    """CPU seconds of one run of `figure`'s probe in `tree` (None: this checkout)."""
    root = tree or Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    arg = str(trace) if figure == "simulate" else str(tmp)
    out = subprocess.run(
        [sys.executable, "-c", PROBES[figure], arg],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"{figure} in {root}: {out.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_s"])


def _write_trace(path: Path) -> None:
    """A synthetic SWF trace (3,000 jobs on 1,024 processors), the same file for both sides."""
    from xce.sched.sim.swf import write_swf
    from xce.sched.sim.workload import synthetic

    path.write_text(write_swf(synthetic(3_000, max_procs=1024, seed=7), {"MaxProcs": "1024"}))


def compare_figure(figure: str, sides: tuple[Side, Side], runs: int, tmp: Path, trace: Path) -> str:
    """ABBA runs of one in-process figure; a line with each side's median CPU and the ratio."""
    cpu: dict[str, list[float]] = {side.label: [] for side in sides}
    for run_no in range(runs):
        for side in sides if run_no % 2 == 0 else sides[::-1]:
            seconds = _probe(figure, side.tree, tmp, trace)
            cpu[side.label].append(seconds)
            print(f"  {figure} run {run_no + 1} {side.label}: {seconds:.3f} s CPU", file=sys.stderr)
    base, this = (median(cpu[side.label]) for side in sides)

    def runs(label: str) -> str:
        return f"{min(cpu[label]):.3f}..{max(cpu[label]):.3f}"

    return (
        f"{figure:<9} baseline {base:8.3f} s CPU ({runs(sides[0].label)})  "
        f"this {this:8.3f} s CPU ({runs(sides[1].label)})  this / baseline "
        f"{this / base:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--baseline", help="a commit (e.g. main, a sha)")
    source.add_argument(
        "--tree", type=Path, help="a directory holding an `xce` package (e.g. a patched copy)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per side (default 5)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--fsync", default="interval", choices=("always", "interval"))
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--figures",
        default=",".join(FIGURES),
        help=f"comma-separated, of {', '.join(FIGURES)} (default: all)",
    )
    args = parser.parse_args(argv)
    figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)} (known: {', '.join(FIGURES)})")
    with (
        tempfile.TemporaryDirectory(prefix="xce-compare-", dir=args.dir) as tmp,
        _baseline(args.baseline, args.tree, Path(tmp)) as (tree, commit),
    ):
        plan = Plan.make(True, Path(tmp))
        plan = Plan(
            **{
                **vars(plan),
                "http_runs": args.runs,
                "http_warmup": args.warmup,
                "http_seconds": args.seconds,
            }
        )
        sides = (Side(f"baseline {commit}", tree), Side("this checkout", None))
        load_before = psutil.getloadavg()
        lines = []
        if any(f != "submit" for f in figures):
            trace = Path(tmp) / "trace.swf"
            _write_trace(trace)
            for figure in (f for f in FIGURES if f in figures and f != "submit"):
                lines.append(compare_figure(figure, sides, args.runs, Path(tmp), trace))
        if "submit" in figures:
            compare(plan, args.clients, args.fsync, sides)
        load_after = psutil.getloadavg()
    for line in lines:
        print(line)
    if "submit" not in figures:
        print(
            f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {psutil.cpu_count()} CPUs"
        )
        return 0
    base, this = sides
    print(
        f"{args.clients} clients, wal_fsync = {args.fsync!r}, {args.runs} runs per side "
        f"(ABBA), {args.seconds:g} s windows; medians (min..max); load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f} on {psutil.cpu_count()} CPUs"
    )
    print(base.line())
    print(this.line())
    print(
        f"this / baseline: {this.rate / base.rate:.2f}x jobs/s, "
        f"{this.cpu_us / base.cpu_us:.2f}x controller CPU per job"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
