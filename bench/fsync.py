"""Figure 1: the raw fdatasync rate of the disk under the bench's directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.common import Plan, Row, median, spread

RECORD = 200
BATCH = 64


def _rate(path: Path, per_sync: int, seconds: float) -> float:
    """fdatasyncs per second, each after one os.write of `per_sync` records."""
    data = os.urandom(RECORD) * per_sync
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)  # allocate the first block outside the timing
        os.fdatasync(fd)
        syncs = 0
        started = time.perf_counter()
        deadline = started + seconds
        while True:
            os.write(fd, data)
            os.fdatasync(fd)
            syncs += 1
            now = time.perf_counter()
            if now >= deadline:
                return syncs / (now - started)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def run(plan: Plan) -> tuple[list[Row], dict[str, float]]:
    single: list[float] = []
    batched: list[float] = []
    for i in range(plan.repeats):  # interleaved, so drift in the disk hits both alike
        single.append(_rate(plan.root / f"fsync-1-{i}", 1, plan.fsync_seconds))
        batched.append(_rate(plan.root / f"fsync-64-{i}", BATCH, plan.fsync_seconds))
    one = median(single)
    groups = median(batched)
    rows = [
        Row(
            "1a raw fsync: 200 B write + fdatasync",
            f"{one:,.0f} rec/s ({1e6 / one:,.0f} us/sync; {spread(single)})",
            data={"records_per_s": one, "runs": single},
        ),
        Row(
            f"1b raw fsync: batch of {BATCH} per fdatasync",
            f"{groups * BATCH:,.0f} rec/s ({BATCH} x {groups:,.0f} syncs/s; "
            f"{spread(batched)} syncs/s)",
            data={"records_per_s": groups * BATCH, "syncs_per_s": groups, "runs": batched},
        ),
    ]
    return rows, {"single": one, "batch_records": groups * BATCH, "batch_syncs": groups}
