"""Figure 3: `WalWriter` alone, in-process: append + sync from 1, 8 and 64 coroutines.

No HTTP, no JSON, no state: what is left is encoding, the group-commit hand-off to the WAL
thread, and the fdatasync itself. Also the CPU cost of encoding one event, and how much CPU
the generated reader and writer (`xce.wire.fast`, `xce.wire.fast_write`) save against
pycapnp's reflective reader and builder on the same records, side by side in one process (a
fast path that silently fell back would show about 1x).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable

from bench.common import Plan, Row, median, spread, submitted
from xce.core import events as ev
from xce.core.model import JobSpec, Usage
from xce.store.wal.framing import frame
from xce.store.wal.writer import WalWriter
from xce.wire.codec import decode_entry_reflective, encode_entry
from xce.wire.fast import read_entry
from xce.wire.fast_write import encode_entry_fast

LEVELS = (1, 8, 64)


async def _load(plan: Plan, writers: int, run: int) -> dict[str, float]:
    directory = plan.root / f"wal-{writers}-{run}"
    wal = WalWriter(directory, next_seq=1)
    stop = False
    numbers = iter(range(1, 1 << 62))

    async def writer() -> None:
        while not stop:
            wal.append(submitted(next(numbers)))
            await wal.sync()

    tasks = [asyncio.create_task(writer()) for _ in range(writers)]
    try:
        await asyncio.sleep(min(0.5, plan.wal_seconds / 3))  # warm-up (segment creation)
        s0 = dict(wal.stats)
        t0 = time.perf_counter()
        await asyncio.sleep(plan.wal_seconds)
        s1 = dict(wal.stats)
        t1 = time.perf_counter()
    finally:
        stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await wal.close()
        shutil.rmtree(directory, ignore_errors=True)
    records = s1["records"] - s0["records"]
    fsyncs = s1["fsyncs"] - s0["fsyncs"]
    return {
        "records_per_s": records / (t1 - t0),
        "fsyncs_per_s": fsyncs / (t1 - t0),
        "group": records / fsyncs if fsyncs else float("nan"),
        "us_per_sync": (s1["fsync_seconds"] - s0["fsync_seconds"]) / fsyncs * 1e6
        if fsyncs
        else float("nan"),
    }


def encode_cost(plan: Plan) -> float:
    """Microseconds to build, encode and frame one JobSubmitted event (median of runs)."""
    n = 5_000 if plan.quick else 20_000
    runs = []
    for _ in range(plan.repeats):
        started = time.perf_counter()
        for i in range(n):
            frame(encode_entry(i, 0, submitted(i)))
        runs.append((time.perf_counter() - started) / n * 1e6)
    return median(runs)


def _typical_events() -> list[ev.Event]:
    spec = JobSpec(user="alice", queue="normal", command="true", submit_host="h0")
    return [
        ev.JobSubmitted(1.0, 1, spec),
        ev.JobStarted(1.0, "1", "h1"),
        ev.JobFinished(1.0, "1", 1, 0, None, Usage(1.0, 0.5, 10, 2.0)),
    ] * 300


def _cpu(work: Callable[[], object], repeats: int) -> float:
    """Median process CPU seconds of `work()` over `repeats` runs."""
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        work()
        runs.append(time.process_time() - started)
    return median(runs)


def fast_path_ratios(plan: Plan) -> tuple[float, float]:
    """(reference reader / fast reader, builder / fast writer): CPU ratios, medians of runs
    alternating both sides so that a change in the machine's load hits both alike."""
    events = _typical_events()
    records = [encode_entry(i + 1, 1, e) for i, e in enumerate(events)]
    repeats = max(5, plan.repeats)
    read_fast = _cpu(lambda: [read_entry(r) for r in records], repeats)
    read_ref = _cpu(lambda: [decode_entry_reflective(r) for r in records], repeats)
    write_fast = _cpu(lambda: [encode_entry_fast(7, 1, e) for e in events], repeats)
    write_ref = _cpu(lambda: [encode_entry(7, 1, e) for e in events], repeats)
    return read_ref / read_fast, write_ref / write_fast


def run(plan: Plan, raw: dict[str, float]) -> list[Row]:
    results: dict[int, list[dict[str, float]]] = {n: [] for n in LEVELS}
    for run_no in range(plan.repeats):
        for writers in LEVELS:
            results[writers].append(asyncio.run(_load(plan, writers, run_no)))
    rows = []
    for writers in LEVELS:
        runs = results[writers]
        rates = [r["records_per_s"] for r in runs]
        mid = sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]
        rows.append(
            Row(
                f"3  WalWriter alone, {writers} coroutine{'s' * (writers > 1)}",
                f"{median(rates):,.0f} rec/s ({spread(rates)}); grp {mid['group']:.1f}, "
                f"{mid['fsyncs_per_s']:,.0f} fsync/s, {mid['us_per_sync']:,.0f} us/group in "
                "WAL thread",
                data={"records_per_s": median(rates), "runs": runs},
            )
        )
    top = median([r["records_per_s"] for r in results[64]])
    ratio = top / raw["batch_records"]
    cost = encode_cost(plan)
    rows.append(
        Row(
            "3  WalWriter 64 / 1b fsync limit",
            f"{ratio:.1%} ({top:,.0f} / {raw['batch_records']:,.0f} rec/s)",
            "-",
            "info",
            data={"ratio": ratio},
        )
    )
    rows.append(
        Row(
            "3  encode_entry+frame, 1 JobSubmitted",
            f"{cost:.1f} us/event on the loop (ceiling {1e6 / cost:,.0f}/s)",
            data={"us_per_event": cost},
        )
    )
    reading, writing = fast_path_ratios(plan)
    rows.append(
        Row(
            "3  generated reader vs pycapnp reader",
            f"{reading:.1f}x less CPU (typical records)",
            "> 1.8x",
            "pass" if reading > 1.8 else "missed",
            data={"ratio": reading},
        )
    )
    rows.append(
        Row(
            "3  generated writer vs pycapnp builder",
            f"{writing:.1f}x less CPU (typical records)",
            "> 1.25x",
            "pass" if writing > 1.25 else "missed",
            data={"ratio": writing},
        )
    )
    return rows
