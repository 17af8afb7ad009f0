"""Scheduling: a pure function from a snapshot of the cluster to placements.

`plan(snapshot, now) -> Plan` (xce/sched/pipeline.py) is the only boundary the controller
depends on: the policies live in plugins chosen per queue (xce/sched/plugins), and the
simulator (xce/sched/simulate.py) calls the same function, so the pass could also move into
its own process without touching the controller.
"""

from xce.sched.snapshot import HostView, PendingArray, PendingJob, Snapshot, snapshot_of
from xce.sched.types import Placement, Plan

__all__ = [
    "HostView",
    "PendingArray",
    "PendingJob",
    "Placement",
    "Plan",
    "Snapshot",
    "snapshot_of",
]
