"""Cluster-wide scheduler settings (`[scheduler]` in the config): fairshare groups and decay.

Per-queue choices (plugins, limits, shares) live on `QueueRecord`, so they travel with the
queue through the WAL; what is here is the same for every queue and read only by the
controller (and the simulator) when it builds a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from xce.config_check import ConfigError, PosFloat, Table, error, hint
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


class SchedulerTable(Table):
    """`[scheduler]` as written in the file."""

    fairshare_half_life_s: Annotated[PosFloat, hint("must be a positive number")] = 3600.0
    groups: Annotated[
        dict[str, Annotated[tuple[str, ...], error("must be a list of user names")]],
        error("must be a table of group = [users]"),
    ] = {}
    priority: dict[str, Any] = {}  # checked by xce/sched/priority.parse_priority

    def settings(self) -> SchedulerSettings:
        try:
            priority = parse_priority(self.priority)
        except ValueError as exc:  # its messages name scheduler.priority.<key>
            raise ConfigError(str(exc)) from None
        groups = tuple(sorted(self.groups.items()))
        return SchedulerSettings(float(self.fairshare_half_life_s), groups, priority)
