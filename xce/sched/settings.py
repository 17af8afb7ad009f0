"""Cluster-wide scheduler settings (`[scheduler]` in the config): fairshare groups and decay.

Per-queue choices (plugins, limits, shares) live on `QueueRecord`, so they travel with the
queue through the WAL; what is here is the same for every queue and read only by the
controller (and the simulator) when it builds a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xce.sched.priority import PrioritySettings, parse_priority


@dataclass(frozen=True)
class SchedulerSettings:
    """`fairshare_half_life_s`: finished usage loses half its weight in this time (LSF's
    HIST_HOURS). `groups`: fairshare group -> member users; a user in no group belongs to
    the group `default`."""

    fairshare_half_life_s: float = 3600.0
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # `[scheduler.priority]`: job priority range and multifactor weights (xce/sched/priority)
    priority: PrioritySettings = field(default_factory=PrioritySettings)

    def group_map(self) -> dict[str, str]:
        """user -> group (the first group that lists the user wins)."""
        out: dict[str, str] = {}
        for group, members in self.groups:
            for user in members:
                out.setdefault(user, group)
        return out


def parse_scheduler(data: Any) -> SchedulerSettings:
    """Validate a `[scheduler]` table; raises ValueError whose message names the key."""
    if not isinstance(data, dict):
        raise ValueError("scheduler must be a table")
    unknown = sorted(set(data) - {"fairshare_half_life_s", "groups", "priority"})
    if unknown:
        raise ValueError(
            f"unknown key scheduler.{unknown[0]} (allowed: fairshare_half_life_s, groups, priority)"
        )
    half_life = data.get("fairshare_half_life_s", 3600.0)
    if isinstance(half_life, bool) or not isinstance(half_life, int | float) or half_life <= 0:
        raise ValueError(
            f"scheduler.fairshare_half_life_s must be a positive number, got {half_life!r}"
        )
    groups = data.get("groups", {})
    if not isinstance(groups, dict):
        raise ValueError("scheduler.groups must be a table of group = [users]")
    parsed = []
    for name, members in sorted(groups.items()):
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ValueError(f"scheduler.groups.{name} must be a list of user names")
        parsed.append((name, tuple(members)))
    priority = parse_priority(data.get("priority", {}))
    return SchedulerSettings(float(half_life), tuple(parsed), priority)
