"""Cluster-wide scheduler settings (`[scheduler]` in the config): fairshare groups and decay.

Per-queue choices (plugins, limits, shares) live on `QueueRecord`, so they travel with the
queue through the WAL; what is here is the same for every queue and read only by the
controller (and the simulator) when it builds a snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from xce.config.check import PosFloat, Table, values
from xce.core.validation import Invalid, error, hint

Zeroed = Annotated[float, hint("must be a number of 0 or more", ge=0)]
Whole = Annotated[int, hint("must be a number of 0 or more", ge=0)]


# The scheduler plugins that ship with XCE, by name, with their kind (xce/sched/plugins; a
# test holds the two equal). A config may name only these, and a queue takes at most one
# plugin of each kind but `filter`. Declared here so that the config file's tables are
# checked without the scheduler.
BUILTIN_PLUGINS: dict[str, str] = {
    "backfill": "reserve",
    "fairshare": "order",
    "fairshare-group": "order",
    "fcfs": "order",
    "first-fit": "score",
    "multifactor": "order",
    "online": "filter",
    "pack": "score",
    "predictive": "reserve",
    "queue-hosts": "filter",
    "select": "filter",
    "short-first": "order",
    "spread": "score",
    "strict": "reserve",
}


def plugins_problem(plugins: Sequence[str]) -> str | None:
    """What is wrong with a queue's `plugins` list, in the scheduler's words, or None."""
    chosen: dict[str, str] = {}
    for name in plugins:
        kind = BUILTIN_PLUGINS.get(name)
        if kind is None:
            known = ", ".join(sorted(BUILTIN_PLUGINS))
            return f"unknown scheduler plugin {name!r} (known: {known})"
        if kind == "filter":
            continue
        if chosen.get(kind, name) != name:
            return f"plugins {chosen[kind]!r} and {name!r} are both {kind} plugins: choose one"
        chosen[kind] = name
    return None


class PrioritySettings(Table, frozen=True):
    """`[scheduler.priority]`, declared once (xce/config/check.py words its errors): job
    priorities run 0..max_job_priority; a user may give at most `default_job_priority` (only
    lower their own jobs, as LSF's bsub -sp and Slurm's positive --nice); operators and
    admins any value in the range."""

    default_job_priority: Whole = 50
    max_job_priority: Annotated[int, hint("must be at least 1", ge=1)] = 100
    max_age_s: Annotated[float, hint("must be above 0", gt=0)] = 7 * 86400.0
    weight_queue: Zeroed = 1000.0
    weight_job: Zeroed = 1000.0
    weight_age: Zeroed = 100.0
    weight_fairshare: Zeroed = 100.0
    weight_size: Zeroed = 0.0

    def __post_init__(self) -> None:
        if self.default_job_priority > self.max_job_priority:
            raise Invalid("default_job_priority is above max_job_priority")


class PredictiveSettings(Table, frozen=True):
    """`[scheduler.predictive]`, read by the `predictive` policy (xce/sched/plugins/
    predictive.py, short_first.py). `guard_factor`: a job waiting longer than this many
    times its requested time (its walltime; `guard_max_s` at most, when set) is starving:
    the oldest starving job goes first and a starving job's reservation is judged by
    walltimes, which nothing placed after it can delay; `guard_min_s` is a floor under that
    bound. `short_weight`: how many seconds of waiting one second of predicted run time is
    worth in the queue order (0: first come, first served; larger: shorter first).
    `order_trust`: the order reads a job's prediction as no less than its request divided by
    this (None: the prediction as it is), so a job its history predicts far shorter than it
    asks cannot pass the whole queue on that history alone: wrong, it holds its slots up to
    its request while every job it passed waits. Backfill still judges by the full
    prediction. The defaults are the ones measured best on the traces of
    docs/performance.md: `order_trust` 3 keeps a short history from moving a job asking
    hours ahead of everything (LLNL-Atlas's longest wait) while still trusting it more than
    EASY's order does, and `guard_max_s` 72 h bounds what that costs the jobs asking a day
    or more, whose own bound (5 days and up) is reached only after shorter jobs have passed
    them for days. `wait_factor`: a job is also starving once it has waited this many times
    the average wait of the last jobs to start (`wait_min_s` at least; None: only its own
    bound), so a job is protected once it waits far longer than the queue makes jobs wait
    now (CEA-Curie's longest waits: days where the average is minutes). TOML has no null:
    a site sets `order_trust`, `guard_max_s` or `wait_factor` very large to switch it off."""

    guard_factor: Annotated[float, hint("must be above 0", gt=0)] = 5.0
    guard_min_s: Zeroed = 0.0
    guard_max_s: Annotated[float, hint("must be above 0", gt=0)] | None = 259200.0
    short_weight: Zeroed = 100.0
    order_trust: Annotated[float, hint("must be above 0", gt=0)] | None = 3.0
    wait_factor: Annotated[float, hint("must be above 0", gt=0)] | None = 200.0
    wait_min_s: Zeroed = 86400.0


class SchedulerKeys(Table, frozen=True):
    """The `[scheduler]` keys read as written. `fairshare_half_life_s`: finished usage loses
    half its weight in this time (LSF's HIST_HOURS); `priority` (`[scheduler.priority]`):
    job priority range and multifactor weights (xce/sched/priority); `predictive`
    (`[scheduler.predictive]`): the starvation guard and queue order of the `predictive`
    policy."""

    fairshare_half_life_s: Annotated[PosFloat, hint("must be a positive number")] = 3600.0
    priority: PrioritySettings = msgspec.field(default_factory=PrioritySettings)
    predictive: PredictiveSettings = msgspec.field(default_factory=PredictiveSettings)


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
