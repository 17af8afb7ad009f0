"""Figure 6: resident memory per pending job, measured in a fresh subprocess.

`python -m bench.memory N` imports XCE, builds an empty state with its queue, then applies N
JobSubmitted events (each with its own spec strings, as decoded from each request's JSON)
and prints the RSS before and after as JSON.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from bench.common import Plan, Row, count, median

TARGET = 1024


def child(n: int) -> dict[str, int]:
    import psutil

    from bench.common import build_state

    me = psutil.Process()
    warm = build_state(10)  # imports, handler tables and first allocations before `before`
    del warm
    gc.collect()
    before = me.memory_info().rss
    state = build_state(n)
    gc.collect()
    after = me.memory_info().rss
    assert len(state.jobs) == n and len(state.pending) == n
    return {"jobs": n, "rss_before": before, "rss_after": after}


def run(plan: Plan) -> list[Row]:
    n = plan.memory_jobs
    results = []
    for _ in range(plan.memory_runs):
        proc = subprocess.run(
            [sys.executable, "-m", "bench.memory", str(n)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory child failed:\n{proc.stderr[-2000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    per_job = [(r["rss_after"] - r["rss_before"]) / n for r in results]
    value = median(per_job)
    tag = f"{count(n)}" + (" (quick; full: 200k)" if plan.quick else "")
    rss = median([r["rss_after"] for r in results]) / (1 << 20)
    return [
        Row(
            f"6  RSS per pending job, {tag}",
            f"{value:,.0f} B/job (of {len(per_job)}; RSS {rss:,.0f} MiB after)",
            f"< {TARGET} B/job",
            "PASS" if value < TARGET else "FAIL",
            data={"bytes_per_job": value, "runs": results},
        )
    ]


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]))))
