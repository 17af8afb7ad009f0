"""Scheduling: a pure function from a snapshot of the cluster to placements.

`plan(snapshot, now) -> Plan` is the only boundary the controller depends on, so the placement
policy can be replaced (the plugin engine) or moved into its own process without touching it.
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
