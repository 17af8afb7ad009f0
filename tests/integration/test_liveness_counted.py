"""Liveness counted in heartbeats heard, with real processes: hosts whose worker process is
killed with SIGKILL are marked unavailable while the other hosts beat on, and none of those
is ever marked (the controller's log says so, not only the end state)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from bench.controller import TOKEN, Controller
from bench.load import GroupPlan, marked_unavailable, worker_process

INTERVAL = 0.5
GROUP = 6  # hosts per worker process
EXTRA = f"""
heartbeat_interval_s = {INTERVAL}
missed_heartbeats = 3
fence_timeout_s = 20.0
"""


def _statuses(ctl: Controller) -> dict[str, str]:
    return {h["name"]: h["status"] for h in ctl.get("/api/v1/hosts")["hosts"]}


def test_killed_hosts_go_unavailable_while_the_others_never_do(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    with Controller(tmp_path / "c", extra=EXTRA + "wal_segment_mb = 1") as ctl:
        procs: list[Any] = []
        for first in (0, GROUP):
            plan = GroupPlan(ctl.url, TOKEN, first, GROUP, INTERVAL, 0.1, 5)
            procs.append(ctx.Process(target=worker_process, args=(plan, go, stop, out)))
        try:
            for proc in procs:
                proc.start()
            for _ in procs:
                kind, what = out.get(True, 60)
                assert kind == "ready", what
            go.set()
            time.sleep(4 * INTERVAL)
            assert set(_statuses(ctl).values()) == {"online"}
            doomed = procs[0]
            doomed.kill()  # SIGKILL: its hosts fall silent mid-conversation
            doomed.join(10)
            dead = {f"sim{i:05d}" for i in range(GROUP)}
            # well inside deadline + fence_timeout_s: counted, not merely timed out
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                statuses = _statuses(ctl)
                if all(statuses[h] == "unavailable" for h in dead):
                    break
                time.sleep(0.2)
            time.sleep(3 * INTERVAL)  # the living keep beating past the others' deadline
            statuses = _statuses(ctl)
            assert {h for h, s in statuses.items() if s != "online"} == dead
            assert set(marked_unavailable(ctl.log, 0)) == dead
        finally:
            stop.set()
            go.set()
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
