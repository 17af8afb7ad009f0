"""`python -m bench [--quick] [--json FILE] [--dir DIR]`: run every figure, print one table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench import (
    arrays,
    artefacts,
    auth,
    controller,
    failover,
    fsync,
    launch,
    memory,
    persist,
    sched,
    transport,
    tui,
    wal,
)
from bench.common import Plan, Row, table


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="20k jobs instead of 1M and short runs (about a minute)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to create the temp dir (the disk under test; default /tmp)",
    )
    return parser.parse_args(argv)


def _revision() -> str:
    """The commit measured, with `-dirty` if the working tree differs from it."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            cwd=Path(__file__).resolve().parent.parent,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, of this process and its reaped children)."""
    total = psutil.cpu_times()
    busy = (
        total.user
        + total.nice
        + total.system
        + getattr(total, "irq", 0.0)
        + getattr(total, "softirq", 0.0)
    )
    mine = psutil.Process().cpu_times()
    return busy, mine.user + mine.system + mine.children_user + mine.children_system


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: controllers, temp dirs


def _figure(name: str, fn: Callable[[], list[Row]], rows: list[Row], started: float) -> bool:
    print(f"[{time.monotonic() - started:6.1f} s] figure {name} ...", file=sys.stderr, flush=True)
    try:
        rows.extend(fn())
        return True
    except Exception as exc:
        traceback.print_exc()
        rows.append(
            Row(
                f"{name}  ERROR", f"{type(exc).__name__}: {exc}".splitlines()[0][:160], "-", "ERROR"
            )
        )
        return False


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="xce-bench-", dir=args.dir))
    plan = Plan.make(args.quick, root)
    rows: list[Row] = []
    ok = True
    started = time.monotonic()
    busy0, mine0 = _cpu_seconds()
    raw: dict[str, float] = {}
    try:

        def fig1() -> list[Row]:
            out, found = fsync.run(plan)
            raw.update(found)
            return out

        ok &= _figure("1", fig1, rows, started)
        if raw:
            ok &= _figure("2", lambda: controller.run(plan, raw), rows, started)
            ok &= _figure("3", lambda: wal.run(plan, raw), rows, started)
        ok &= _figure("4/5", lambda: persist.run(plan), rows, started)
        ok &= _figure("6", lambda: memory.run(plan), rows, started)
        ok &= _figure("7", lambda: transport.run(plan), rows, started)
        ok &= _figure("8", lambda: sched.run(plan), rows, started)
        ok &= _figure("9", lambda: auth.run(plan), rows, started)
        ok &= _figure("10", lambda: artefacts.run(plan), rows, started)
        ok &= _figure("11", lambda: tui.run(plan), rows, started)
        ok &= _figure("12", lambda: failover.run(plan), rows, started)
        ok &= _figure("13", lambda: arrays.run(plan), rows, started)
        ok &= _figure("14", lambda: launch.run(plan), rows, started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    busy1, mine1 = _cpu_seconds()
    others = max(0.0, (busy1 - busy0) - (mine1 - mine0)) / elapsed  # in cores
    mode = (
        "QUICK: 20k jobs instead of 1M (20k instead of 200k for memory), short runs"
        if plan.quick
        else "FULL"
    )
    revision = _revision()
    print(
        f"XCE persistence benchmark, {mode}; xce {revision}; {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, disk under {args.dir}; medians of runs; "
        f"{elapsed:,.0f} s; other processes used {others:.2f} of the cores meanwhile"
    )
    print(table(rows))
    print(
        "2: grp = records per fdatasync (controller's write syscalls in the window); "
        "1st/last s = jobs/s in the window's first and last second; cpu = share of one core"
    )
    if plan.quick:
        print("* quick mode: verdict on a linear extrapolation to 1M jobs of what grows with N")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "mode": "quick" if plan.quick else "full",
                    "dir": str(args.dir),
                    "revision": revision,
                    "other_processes_cores": others,
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "seconds": elapsed,
                    "rows": [vars(r) for r in rows],
                },
                indent=2,
                default=str,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
