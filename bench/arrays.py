"""Figure 13: one job array of a million tasks, submitted to a real controller over HTTP.

An array is one record however many tasks it has (tasks are materialised only as they start),
so the submit costs about what a single job does, and the controller's memory barely moves.
`python -m bench.arrays` runs it alone.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request

import psutil

from bench.common import Plan, Row, median
from bench.controller import TOKEN, Controller

TASKS = 1_000_000
TARGET_MS = 1000.0  # an array submit should feel like a job submit, whatever its size


def _submit(url: str, body: dict) -> tuple[float, dict]:
    req = urllib.request.Request(
        url + "/api/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer = json.loads(resp.read())
    return (time.perf_counter() - started) * 1000, answer


def run(plan: Plan) -> list[Row]:
    times, growth = [], []
    single = []
    with Controller(plan.root / "arrays") as ctl:
        assert ctl.proc is not None
        proc = psutil.Process(ctl.proc.pid)
        for i in range(plan.repeats):
            single.append(_submit(ctl.url, {"command": "true", "user": "bench"})[0])
            before = proc.memory_info().rss
            ms, answer = _submit(
                ctl.url,
                {
                    "command": "echo $XCE_ARRAY_INDEX",
                    "user": "bench",
                    "array": f"1-{TASKS}",
                    "name": f"big{i}",
                },
            )
            growth.append(proc.memory_info().rss - before)
            times.append(ms)
        shown = ctl.get(f"/api/v1/jobs/{answer['job_id']}")
    value = median(times)
    return [
        Row(
            f"13 array submit, {TASKS:,} tasks (one record)",
            f"{value:,.1f} ms median (single job {median(single):,.1f} ms); "
            f"controller RSS +{median(growth) / 1024:,.0f} KiB",
            f"< {TARGET_MS:,.0f} ms",
            "PASS" if value < TARGET_MS else "FAIL",
            data={
                "ms": times,
                "single_ms": single,
                "rss_growth": growth,
                "array_state": shown.get("state"),
            },
        )
    ]


if __name__ == "__main__":
    import tempfile
    from pathlib import Path

    from bench.common import table

    with tempfile.TemporaryDirectory() as tmp:
        print(table(run(Plan.make(True, Path(tmp)))))
    sys.exit(0)
