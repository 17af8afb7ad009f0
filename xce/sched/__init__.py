"""Scheduling: a pure function from a snapshot of the cluster to placements.

`plan(snapshot, now) -> Plan` (xce/sched/passes/pipeline.py) is the only boundary the controller
depends on: the policies live in plugins chosen per queue (xce/sched/plugins), and the
simulator (xce/sched/sim/simulate.py) calls the same function, so the pass could also move into
its own process without touching the controller.

    snapshot (incremental, from ClusterState) ──▶ passes/pipeline.plan
        order pending jobs (plugins: fcfs, priority, fairshare, multifactor)
        ──▶ per job: passes/hosts (filters, candidate sets, ranking, devices)
        ──▶ passes/place (queue gates, limits, one host) or passes/spread (several hosts)
        ──▶ place now, or reserve (EASY backfill, advance reservations)
    ──▶ Plan (placements, reasons) ──▶ passes/preemption (after the pass)

* `passes/`: the pass and its parts; `admission/`: submit-time checks (could any host ever run
  the job?); `sim/`: `xce simulate`, the same `plan` in virtual time; `expr/`: LSF resource
  requirement strings; `plugins/`: the policies, chosen per queue.
"""

from typing import Any

# Loaded on first use (PEP 562), so that light modules of this package (the SWF rules that
# `xce simulate --help` prints) do not pull the cluster state into every CLI start-up.
_HOMES = {
    "HostView": "snapshot",
    "PendingArray": "snapshot",
    "PendingJob": "snapshot",
    "Snapshot": "snapshot",
    "snapshot_of": "snapshot",
    "Placement": "types",
    "Plan": "types",
}

__all__ = [
    "HostView",
    "PendingArray",
    "PendingJob",
    "Placement",
    "Plan",
    "Snapshot",
    "snapshot_of",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
