"""Figures 4 and 5: checkpoints of N pending jobs, and recovery of the biggest one.

4: `copy_state` (the pause on the loop), `write_checkpoint` in a thread, the file size, and
the real event-loop pause while `DurableLog.checkpoint()` runs (a 1 ms ticker's longest gap).
5: recovery of the biggest one, as a running controller leaves it (`bench/recovery.py`).
Also one scheduling pass over N pending jobs, which runs on the loop as well.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import time
from pathlib import Path

from bench import recovery
from bench.common import Plan, Row, Ticker, build_state, count, median, size, verdict
from xce.core.state import ClusterState
from xce.sched.passes import pipeline
from xce.sched.snapshot import snapshot_of
from xce.store.checkpoint import copy_state, write_checkpoint
from xce.store.durable import DurableLog, StoreSettings

PAUSE_TARGET_MS = 100.0


def _scale(plan: Plan, n: int) -> tuple[float, bool]:
    """The factor to the 1M the targets are about, and whether the verdict extrapolates.

    Only quick mode extrapolates; a full run judges its 1M measurement itself.
    """
    return plan.full_big / n, plan.quick and n != plan.full_big


def _pause_row(
    plan: Plan, n: int, label: str, ms: list[float], detail: str = "", growing: float | None = None
) -> Row:
    """A loop pause against the 1M target; `growing` is the part that scales with N (ms).

    In quick mode the verdict is on the measured pause with `growing` (all of it by default)
    scaled linearly to 1M jobs.
    """
    factor, extrapolated = _scale(plan, n)
    value = median(ms)
    part = value if growing is None else min(growing, value)
    at_1m = value + part * (factor - 1)
    text = f"{value:,.1f} ms (max {max(ms):,.1f} of {len(ms)})"
    if extrapolated:
        text += f" (~{at_1m:,.0f} ms @1M, linear)"
    text += detail
    data = {"jobs": n, "ms": ms, "median_ms": value, "estimate_1m_ms": at_1m}
    if factor != 1 and not extrapolated:  # a smaller size in the full run: context only
        return Row(label, text, data=data)
    return Row(
        label,
        text,
        f"< {PAUSE_TARGET_MS:.0f} ms @1M",
        verdict(at_1m < PAUSE_TARGET_MS, extrapolated),
        data=data,
    )


async def _copy_times(state: ClusterState, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        copy_state(state, state.applied)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def _write_times(state: ClusterState, directory: Path, runs: int) -> tuple[list[float], int]:
    loop = asyncio.get_running_loop()
    times, nbytes = [], 0
    for _ in range(runs):
        copy = copy_state(state, state.applied)
        started = time.perf_counter()
        path = await loop.run_in_executor(None, write_checkpoint, directory, copy)
        times.append(time.perf_counter() - started)
        nbytes = path.stat().st_size
        del copy
    shutil.rmtree(directory, ignore_errors=True)
    return times, nbytes


async def _durable_pause(state: ClusterState, directory: Path) -> dict[str, float]:
    """One `DurableLog.checkpoint()` of `state` into a fresh state dir, under a ticker."""
    store = DurableLog.open(directory, StoreSettings())
    try:
        async with Ticker() as ticker:
            started = time.perf_counter()
            path = await store.checkpoint(state)
            seconds = time.perf_counter() - started
        assert path is not None
        return {
            "max_gap_ms": ticker.max_ms,
            "p99_gap_ms": ticker.percentile_ms(0.99),
            "own_pause_ms": store.stats["last_pause_ms"],
            "seconds": seconds,
        }
    finally:
        await store.writer.close()
        shutil.rmtree(directory, ignore_errors=True)


async def _idle_gap() -> float:
    async with Ticker() as ticker:
        await asyncio.sleep(0.5)
    return ticker.max_ms


def _schedule_pass_ms(state: ClusterState, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        pipeline.plan(snapshot_of(state), time.time())
        out.append((time.perf_counter() - started) * 1000)
    return out


def checkpoints(plan: Plan, n: int, state: ClusterState) -> list[Row]:
    tag = f"{count(n)}" + (" (quick)" if plan.quick else "")
    heavy = n >= 1_000_000
    runs = plan.heavy_repeats if heavy else plan.repeats
    rows = []

    async def main() -> None:
        copies = await _copy_times(state, plan.repeats)
        rows.append(_pause_row(plan, n, f"4  copy_state pause, {tag}", copies))
        writes, nbytes = await _write_times(state, plan.root / f"ckpt-{n}", runs)
        w = median(writes)
        rows.append(
            Row(
                f"4  write_checkpoint (thread), {tag}",
                f"{w:,.2f} s of {len(writes)} ({n / w:,.0f} jobs/s); "
                f"{size(nbytes)} = {nbytes / n:,.0f} B/job",
                data={"jobs": n, "seconds": writes, "bytes": nbytes},
            )
        )
        idle = await _idle_gap()
        pauses = [await _durable_pause(state, plan.root / f"durable-{n}-{i}") for i in range(runs)]
        gaps = [p["max_gap_ms"] for p in pauses]
        own = median([p["own_pause_ms"] for p in pauses])
        took = median([p["seconds"] for p in pauses])
        rows.append(
            _pause_row(
                plan,
                n,
                f"4  DurableLog.checkpoint() max loop gap, {tag}",
                gaps,
                f"; purge+copy {own:,.0f} ms; p99 gap "
                f"{median([p['p99_gap_ms'] for p in pauses]):.1f} ms over {took:,.1f} s; "
                f"idle {idle:.1f} ms",
                growing=own,
            )
        )
        rows[-1].data.update({"runs": pauses, "idle_max_gap_ms": idle})

    asyncio.run(main())
    passes = _schedule_pass_ms(state, runs)
    row = _pause_row(plan, n, f"4x scheduling pass (no hosts), {tag}", passes)
    row.target, row.verdict = "-", "info"  # not a target of this issue; context for 2 and 4
    rows.append(row)
    return rows


def run(plan: Plan) -> list[Row]:
    rows: list[Row] = []
    for n in plan.checkpoint_sizes:
        state = build_state(n)
        rows += checkpoints(plan, n, state)
        if n == plan.big:
            rows += recovery.run(plan, n, state)  # figure 5 (bench/recovery.py)
        del state
        gc.collect()
    return rows
