"""Accounting's insert cost through HTTP: `python -m bench.acct_http [--runs 2] [--seconds 4]`.

`bench/acct.py` measures submit + start + finish through `ControllerService.commit`; this is
the same question asked of a real controller process: clients POST /api/v1/jobs, simulated
workers (bench/load.py's `SimWorker`: the real worker protocol over HTTP, jobs that end at
once) poll their assignments and report each job finished. Runs alternate between
`[controller] accounting = false` and the default (on), so load from other processes hits
both alike. Figures per run: submits acknowledged per second, jobs finished per second, and
the controller process's CPU time (every thread: the loop, the WAL writer, the accounting
writer, drained before it is read) per finished job, the steadier figure on a shared machine.
Each run is short (`--seconds`): the whole bench stays near a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from bench.controller import TOKEN, Controller
from bench.load import run_load


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def one_run(
    root: Path, accounting: bool, seconds: float, clients: int, workers: int
) -> tuple[float, float, float]:
    """(submits/s, finished/s, controller CPU µs per finished job) of one run."""
    extra = "" if accounting else "accounting = false"
    with Controller(root, extra=extra) as ctl:
        assert ctl.proc is not None
        before = _cpu(ctl.proc.pid)
        started = time.perf_counter()
        result = asyncio.run(
            run_load(
                ctl.url,
                TOKEN,
                workers=workers,
                clients=clients,
                seconds=seconds,
                heartbeat_s=2.0,
                job_s=0.0,
                drain_timeout=30.0,
            )
        )
        elapsed = time.perf_counter() - started
        time.sleep(1.0)  # the accounting writer's last transaction (it wakes every 0.2 s)
        cpu = _cpu(ctl.proc.pid) - before
        if result.missing or result.not_done:
            raise SystemExit(
                f"lost or unfinished jobs: {result.missing[:5]} {list(result.not_done.items())[:5]}"
            )
    finished = max(result.finished, 1)
    return len(result.acknowledged) / seconds, finished / elapsed, cpu / finished * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    opts = parser.parse_args(argv)
    found: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="xce-acct-http-") as tmp:
        for i in range(opts.runs):
            for accounting in (False, True):
                root = Path(tmp) / f"{i}-{'with' if accounting else 'without'}"
                found[accounting].append(
                    one_run(root, accounting, opts.seconds, opts.clients, opts.workers)
                )
    print(f"{'accounting':12} {'submits/s':>10} {'finished/s':>11} {'CPU us/job':>11}")
    for accounting, runs in found.items():
        cols = [statistics.median(r[k] for r in runs) for k in range(3)]
        print(
            f"{'on' if accounting else 'off':12} {cols[0]:10.0f} {cols[1]:11.0f} "
            f"{cols[2]:11.0f}   runs: " + ", ".join(f"{r[2]:.0f}" for r in runs)
        )
    off = statistics.median(r[2] for r in found[False])
    on = statistics.median(r[2] for r in found[True])
    print(f"CPU per job with / without accounting: {on / off:.3f}")


if __name__ == "__main__":
    main()
