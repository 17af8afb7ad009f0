"""Cluster-wide scheduler settings (`[scheduler]` in the config): fairshare groups and decay.

Per-queue choices (plugins, limits, shares) live on `QueueRecord`, so they travel with the
queue through the WAL; what is here is the same for every queue and read only by the
controller (and the simulator) when it builds a snapshot.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from xce.config.check import PosFloat, Table, values
from xce.core.validation import error, hint
from xce.sched.priority import PrioritySettings


class SchedulerKeys(Table, frozen=True):
    """The `[scheduler]` keys read as written. `fairshare_half_life_s`: finished usage loses
    half its weight in this time (LSF's HIST_HOURS); `priority` (`[scheduler.priority]`):
    job priority range and multifactor weights (xce/sched/priority)."""

    fairshare_half_life_s: Annotated[PosFloat, hint("must be a positive number")] = 3600.0
    priority: PrioritySettings = msgspec.field(default_factory=PrioritySettings)


class SchedulerSettings(SchedulerKeys, frozen=True):
    """`groups`: fairshare group -> member users, by group name; a user in no group belongs
    to the group `default`."""

    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def group_map(self) -> dict[str, str]:
        """user -> group (the first group that lists the user wins)."""
        out: dict[str, str] = {}
        for group, members in self.groups:
            for user in members:
                out.setdefault(user, group)
        return out


class SchedulerTable(SchedulerKeys, frozen=True):
    """`[scheduler]` as written in the file."""

    groups: Annotated[
        dict[str, Annotated[tuple[str, ...], error("must be a list of user names")]],
        error("must be a table of group = [users]"),
    ] = {}

    def settings(self) -> SchedulerSettings:
        groups = tuple(sorted(self.groups.items()))
        return SchedulerSettings(**values(self, SchedulerKeys), groups=groups)
