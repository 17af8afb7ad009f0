"""Figure 5: restart time as a running controller leaves its state.

A controller checkpoints while its WAL segment keeps filling, so at a restart the newest
checkpoint sits in the middle of the open segment: the records before it are covered, the
ones after it must be replayed. The state here is N pending jobs (the checkpoint, at record
N + 1), a segment that holds the `covered` submits before it and `after` submits behind it
(100k + 100k in the full run: ~62 MB, a nearly full 64 MiB segment), written by the real
`WalWriter`. Submits are the costliest records to decode and apply, so the mix is the worst
case for replay.

Measured: `recover()` in process (with the checkpoint read and the WAL scan apart), the
controller's own start-to-first-answer (`python -m xce controller` on a copy of the same
state until an authenticated `GET /api/v1/cluster` answers 200, interpreter start and imports
included), and `decode_entry` alone on typical submit/start/finish records, against the
reflective reader it replaced. `python -m bench.recovery --jobs 1000000` runs it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from bench.common import Plan, Row, build_state, count, median, spec, verdict
from xce.core import events as ev
from xce.core.model import Usage
from xce.core.state import ClusterState
from xce.store.checkpoint import copy_state, list_checkpoints, read_checkpoint, write_checkpoint
from xce.store.recovery import checkpoint_dir, recover, wal_dir
from xce.store.wal.reader import scan_wal
from xce.store.wal.writer import WalWriter
from xce.wire import codec

RECOVERY_TARGET_S = 10.0
DECODE_TARGET = 100_000  # records/s on one core


def write_scenario(state: ClusterState, state_dir: Path, covered: int, after: int) -> None:
    """Checkpoint `state` (at record n + 1) and a WAL segment with the `covered` submits
    that led to it and `after` new submits behind it."""
    n, seq = len(state.jobs), state.applied
    write_checkpoint(checkpoint_dir(state_dir), copy_state(state, seq))
    last = state.jobs.get(str(n))
    at = last.submit_time if last is not None else time.time()

    async def fill() -> None:
        first = seq - covered + 1
        writer = WalWriter(wal_dir(state_dir), next_seq=first)
        try:
            for i in range(covered + after):
                number = first - 1 + i  # record k + 1 submitted job k
                writer.append(ev.JobSubmitted(at if number <= n else time.time(), number, spec()))
                if i % 512 == 511:
                    await writer.sync()
            await writer.sync()
        finally:
            await writer.close()

    asyncio.run(fill())


def _recover_once(state_dir: Path, expected_jobs: int, after: int) -> dict[str, float]:
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    got = recover(state_dir)
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    if len(got.state.jobs) != expected_jobs or got.replayed != after:
        raise RuntimeError(
            f"recovered {len(got.state.jobs)} jobs, replayed {got.replayed}; "
            f"expected {expected_jobs} and {after}"
        )
    del got
    gc.collect()
    seq, path = list_checkpoints(checkpoint_dir(state_dir))[0]
    started = time.perf_counter()
    read_checkpoint(path)
    ckpt = time.perf_counter() - started
    gc.collect()
    started = time.perf_counter()
    scan = scan_wal(wal_dir(state_dir), seq)  # frames all, decodes what follows seq
    scan_s = time.perf_counter() - started
    return {
        "seconds": total,
        "cpu_s": cpu,
        "checkpoint_s": ckpt,
        "scan_s": scan_s,
        "wal_records": scan.records,
    }


def start_to_first_answer(state_dir: Path, root: Path) -> tuple[float, float]:
    """Seconds from spawning `xce controller` on a copy of `state_dir` to its first
    authenticated API answer, and the CPU seconds the controller had used by then (on a
    shared machine the wall time includes waiting for a core)."""
    from bench.controller import KEYS, TOKEN, Controller
    from xce.auth.keys import key_dir

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, mode=0o700)
    shutil.copytree(state_dir, root / "state")
    shutil.copytree(KEYS, key_dir(root / "state"))
    ctl = Controller(root)
    cfg = ctl._config()
    req = urllib.request.Request(
        ctl.url + "/api/v1/cluster", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with ctl.log.open("ab") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "xce", "controller", "-c", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        while proc.poll() is None and time.perf_counter() - started < 300:
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if resp.status == 200:
                        seconds = time.perf_counter() - started
                        times = psutil.Process(proc.pid).cpu_times()
                        json.loads(resp.read())
                        return seconds, times.user + times.system
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"controller did not answer:\n{ctl.log_text()}")
    finally:
        proc.kill()  # no shutdown checkpoint: the copy is thrown away
        proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def _typical(n: int) -> list[bytes]:
    """Encoded submit, start and finish records in equal parts, as a busy log holds."""
    now = time.time()
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            event: ev.Event = ev.JobSubmitted(now, i, spec())
        elif kind == 1:
            event = ev.JobStarted(now, str(i), "node-0042")
        else:
            event = ev.JobFinished(now, str(i), 1, 0, None, Usage(1.5, 0.25, 1 << 24, 3.0))
        out.append(codec.encode_entry(i + 1, 1, event))
    return out


def decode_rate(records: list[bytes], decode: object, runs: int) -> float:
    """Records per CPU second (process time: the machine is shared) for one core."""
    best = float("inf")
    for _ in range(runs):
        started = time.process_time()
        for data in records:
            decode(data)  # type: ignore[operator]
        best = min(best, time.process_time() - started)
    return len(records) / best


def run(plan: Plan, n: int | None = None, state: ClusterState | None = None) -> list[Row]:
    n = plan.big if n is None else n
    after = plan.recovery_wal_events
    covered = after
    tag = f"{count(n)} jobs, ckpt mid-segment, {count(covered)} covered + {count(after)} after"
    tag += " (quick)" if plan.quick else ""
    state_dir = plan.root / f"recover-{n}"
    if state is None:
        state = build_state(n)
    write_scenario(state, state_dir, covered, after)
    expected = len(state.jobs) + after
    del state
    gc.collect()
    rows = []
    try:
        runs = [_recover_once(state_dir, expected, after) for _ in range(plan.heavy_repeats)]
        factor = plan.full_big / n
        extrapolated = plan.quick and n != plan.full_big
        value = median([r["seconds"] for r in runs])
        text = (
            f"{value:,.2f} s, {median([r['cpu_s'] for r in runs]):,.2f} s CPU (of "
            f"{len(runs)}; checkpoint read "
            f"{median([r['checkpoint_s'] for r in runs]):,.2f} s, WAL scan "
            f"{median([r['scan_s'] for r in runs]):,.2f} s for "
            f"{runs[0]['wal_records']:,.0f} records)"
        )
        if extrapolated:
            text += f" (~{value * factor:,.1f} s @1M, linear)"
        rows.append(
            Row(
                f"5  recover(), {tag}",
                text,
                f"< {RECOVERY_TARGET_S:.0f} s @1M",
                verdict(value * factor < RECOVERY_TARGET_S, extrapolated),
                data={"jobs": n, "runs": runs},
            )
        )
        timed = [
            start_to_first_answer(state_dir, plan.root / f"ctl-{n}-{i}")
            for i in range(plan.heavy_repeats)
        ]
        answers = [wall for wall, _ in timed]
        value = median(answers)
        text = (
            f"{value:,.2f} s, {median([c for _, c in timed]):,.2f} s CPU (of "
            f"{len(answers)}: {', '.join(f'{a:.2f}' for a in answers)})"
        )
        if extrapolated:
            text += f" (~{value * factor:,.1f} s @1M, linear)"
        rows.append(
            Row(
                f"5  controller start to first API answer, {tag}",
                text,
                f"< {RECOVERY_TARGET_S:.0f} s @1M",
                verdict(value * factor < RECOVERY_TARGET_S, extrapolated),
                data={"jobs": n, "seconds": answers, "cpu_s": [c for _, c in timed]},
            )
        )
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    records = _typical(3_000 if plan.quick else 30_000)
    fast = decode_rate(records, codec.decode_entry, plan.repeats)
    reference = getattr(codec, "decode_entry_reflective", codec.decode_entry)
    slow = decode_rate(records, reference, max(1, plan.repeats // 2))
    rows.append(
        Row(
            "5  decode_entry, submit/start/finish 1:1:1, one core",
            f"{fast:,.0f} rec/s (reflective reader: {slow:,.0f} rec/s, {fast / slow:.1f}x)",
            f">= {DECODE_TARGET:,} rec/s",
            verdict(fast >= DECODE_TARGET),
            data={"fast": fast, "reflective": slow},
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--after",
        type=int,
        default=100_000,
        help="records after the checkpoint (as many again before it)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xce-bench-recovery-") as tmp:
        base = Plan.make(args.jobs < 1_000_000, Path(tmp))
        plan = dataclasses.replace(
            base, recovery_wal_events=args.after, heavy_repeats=args.repeats, big=args.jobs
        )
        for row in run(plan, args.jobs):
            print(f"{row.figure}: {row.measured}  [{row.target}: {row.verdict}]", flush=True)


if __name__ == "__main__":
    main()
