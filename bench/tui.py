"""Console figures: the jobs table with 100,000 jobs, headless at 160x48.

- apply 10,000 job updates (usage and state changes, as the event stream delivers them)
  through `XceTui.apply`, then one repaint; once with the order untouched (sorted by id) and
  once with every update moving rows (sorted by CPU time, so the order is rebuilt);
- frame time: one cursor page-down (scroll + repaint of the visible rows) with 100k rows;
- a full re-sort and a filter over the 100k rows (what one rebuild costs).

Times are CPU seconds of this process (`time.process_time`): the console is one thread, so
on an idle machine they equal wall time, and on a busy shared machine they are not inflated by
other processes.

`python -m bench.tui [N]` runs it alone and prints the rows.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from typing import Any

from bench.common import Plan, Row, median

TARGET_APPLY_S = 1.0
TARGET_FRAME_MS = 50.0


def _rows(n: int) -> list[dict[str, Any]]:
    users = ["alice", "bob", "carol", "dave", "erin"]
    queues = ["short", "normal", "long"]
    states = ["PEND", "RUN", "DONE", "EXIT", "USUSP"]
    rnd = random.Random(7)
    now = 1_790_000_000.0
    out = []
    for i in range(1, n + 1):
        state = states[rnd.randrange(len(states))]
        started = state != "PEND"
        out.append(
            {
                "id": str(i),
                "kind": "job",
                "array_id": None,
                "array_index": None,
                "name": f"job-{i}",
                "user": users[i % len(users)],
                "queue": queues[i % 3],
                "state": state,
                "host": f"n{i % 500:03d}" if started else None,
                "submit_time": now - i,
                "start_time": now - i / 2 if started else None,
                "end_time": None,
                "reason": "",
                "usage": {"cpu_time_s": rnd.random() * 1000, "max_rss_bytes": rnd.randrange(2**30)},
            }
        )
    return out


async def _measure(n: int, updates: int, repeats: int) -> dict[str, float]:
    from xce.console.app import XceTui

    rows = _rows(n)
    app = XceTui(["http://127.0.0.1:1"], None, clock=lambda: 1_790_000_000.0, live=False)
    found: dict[str, list[float]] = {
        "apply_inplace": [],
        "apply_moving": [],
        "frame": [],
        "sort": [],
        "filter": [],
        "load": [],
        "paint": [],
    }
    async with app.run_test(size=(160, 48)) as pilot:
        started = time.process_time()
        app.jobs.load(rows)
        app.jobs_screen.table.sync(force=True)
        await pilot.pause()
        found["load"].append(time.process_time() - started)
        table = app.jobs_screen.table
        table.focus()
        rnd = random.Random(11)
        for _ in range(repeats):
            for column, key in (("id", "apply_inplace"), ("cpu", "apply_moving")):
                app.jobs.set_sort(column, descending=True)
                table.sync(force=True)
                await pilot.pause()
                batch = []
                for _ in range(updates):
                    row = dict(rows[rnd.randrange(n)])
                    row["usage"] = {
                        "cpu_time_s": rnd.random() * 1000,
                        "max_rss_bytes": rnd.randrange(2**30),
                    }
                    batch.append(row)
                started = time.process_time()
                for row in batch:
                    app.apply("job", row)
                table.sync(force=True)
                await pilot.pause()
                found[key].append(time.process_time() - started)
            for _ in range(20):
                started = time.process_time()
                await pilot.press("pagedown")
                await pilot.pause()
                found["frame"].append(time.process_time() - started)
                started = time.process_time()
                for y in range(table.size.height):
                    table.render_line(y)
                found["paint"].append(time.process_time() - started)
            started = time.process_time()
            app.jobs.set_sort("user")
            app.jobs.rebuild()
            found["sort"].append(time.process_time() - started)
            from xce.console.filter import parse_filter

            started = time.process_time()
            app.jobs.set_filter(parse_filter("state=RUN,USUSP queue:long"))
            app.jobs.rebuild()
            found["filter"].append(time.process_time() - started)
            app.jobs.set_filter(parse_filter(""))
    return {k: median(v) for k, v in found.items()}


def run(plan: Plan) -> list[Row]:
    n = 100_000
    updates = 10_000
    m = asyncio.run(_measure(n, updates, 1 if plan.quick else 3))
    apply_worst = max(m["apply_inplace"], m["apply_moving"])
    frame_ms = m["frame"] * 1000
    return [
        Row(f"tui: load {n:,} jobs into the table (first listing)", f"{m['load']:.2f} s"),
        Row(
            f"tui: apply {updates:,} job updates, order kept (sort by id)",
            f"{m['apply_inplace']:.2f} s",
            f"< {TARGET_APPLY_S:.0f} s",
            "pass" if m["apply_inplace"] < TARGET_APPLY_S else "missed",
        ),
        Row(
            f"tui: apply {updates:,} job updates that move rows (sort by CPU)",
            f"{m['apply_moving']:.2f} s",
            f"< {TARGET_APPLY_S:.0f} s",
            "pass" if apply_worst < TARGET_APPLY_S else "missed",
        ),
        Row(
            f"tui: frame with {n:,} rows (page down + repaint, 160x48)",
            f"{frame_ms:.1f} ms",
            f"< {TARGET_FRAME_MS:.0f} ms",
            "pass" if frame_ms < TARGET_FRAME_MS else "missed",
        ),
        Row(
            f"tui: paint the visible rows of {n:,} (render_line x 45)",
            f"{m['paint'] * 1000:.1f} ms",
        ),
        Row(
            f"tui: re-sort {n:,} rows / filter {n:,} rows",
            f"{m['sort'] * 1000:.0f} ms / {m['filter'] * 1000:.0f} ms",
        ),
    ]


if __name__ == "__main__":
    from pathlib import Path

    from bench.common import table

    quick = "--quick" in sys.argv
    print(table(run(Plan.make(quick, Path("/tmp")))))
