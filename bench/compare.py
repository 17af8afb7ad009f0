"""Figure 2 against a baseline commit, in one run: `python -m bench.compare --baseline REV`.

The same load (`bench.controller`: N clients POSTing /api/v1/jobs, `wal_fsync = "interval"`
by default, the CPU ceiling) is driven against a controller started from this checkout and
against one started from commit REV (unpacked with `git archive`, run with PYTHONPATH and
working directory on that tree). Runs alternate ABBA (baseline, this, this, baseline, ...) so
that a drift in the machine's load hits both sides alike. It prints, for each side, the median
jobs/s and the median controller CPU per acknowledged submit (user + system of the controller
process over the window, divided by the submits: on a shared machine the clients and other
processes compete for the cores, so CPU per request is the steadier measure of the request
path's cost), with the ratios this / baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import Plan, median, source_tree, spread
from bench.controller import Load, measure


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
    args = parser.parse_args(argv)
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
        compare(plan, args.clients, args.fsync, sides)
        load_after = psutil.getloadavg()
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
