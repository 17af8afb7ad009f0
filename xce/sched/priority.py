"""Multifactor job priority (like Slurm's priority/multifactor), pure.

Each pending job gets five factors, each between 0 and 1, and a weighted sum:

    priority = weight_queue * Q + weight_job * J + weight_age * A
             + weight_fairshare * F + weight_size * S

    Q = the queue's priority / the highest queue priority (0 when none is above 0;
        negative priorities count as 0)
    J = the job's priority (`--priority`, else default_job_priority) / max_job_priority
    A = min(1, time pending / max_age_s)
    F = 1 / (1 + (decayed core-hours + slots in use of the user) / the user's shares)
        (shares from the queue's `shares`, default 1; the usage the fairshare plugin reads)
    S = min(1, slots / the most slots any host has)

Weights and limits are `[scheduler.priority]` in the config. The `multifactor` order plugin
(xce/sched/plugins/multifactor.py) sorts a queue's jobs by this sum, highest first, ties by
submission; queues themselves are still taken in strict queue-priority order by the
pipeline, so Q only ranks within a level. `xce job priority` (GET /api/v1/priority) shows
the factors per pending job, computed here from the same snapshot the scheduler plans on.
The factors are fixed for one pass (fairshare does not move as the pass places jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xce.config.scheduler import PrioritySettings
from xce.core.model import JobSpec, QueueRecord


def check_job_priority(settings: PrioritySettings, priority: int | None, privileged: bool) -> None:
    """Raise ValueError (the caller's 400) unless `priority` may be given by this caller."""
    if priority is None:
        return
    if not 0 <= priority <= settings.max_job_priority:
        raise ValueError(
            f"priority must be between 0 and {settings.max_job_priority}, got {priority}"
        )
    if not privileged and priority > settings.default_job_priority:
        raise ValueError(
            f"priority {priority} is above the default of "
            f"{settings.default_job_priority}: users may only lower their "
            "jobs' priority (operators and admins may raise it)"
        )


@dataclass(frozen=True, slots=True)
class Scale:
    """What normalises the factors in one pass."""

    top_queue_priority: int
    top_host_slots: int


def scale_of(queues: Mapping[str, QueueRecord], host_slots: list[int]) -> Scale:
    return Scale(max((q.priority for q in queues.values()), default=0), max(host_slots, default=0))


@dataclass(frozen=True, slots=True)
class Factors:
    """One job's factors (0..1) and weighted sum, as `xce job priority` shows them."""

    queue: float
    job: float
    age: float
    fairshare: float
    size: float
    priority: float


def factors(
    spec: JobSpec,
    submit_time: float,
    queue: QueueRecord,
    settings: PrioritySettings,
    scale: Scale,
    now: float,
    usage_hours: Mapping[str, float],
    running_slots: Mapping[str, int],
) -> Factors:
    """The documented formula (module docstring) for one pending job or array."""
    q = max(0, queue.priority) / scale.top_queue_priority if scale.top_queue_priority > 0 else 0.0
    own = settings.default_job_priority if spec.priority is None else spec.priority
    j = min(1.0, own / settings.max_job_priority)
    a = min(1.0, max(0.0, now - submit_time) / settings.max_age_s)
    shares = 1.0
    for who, value in queue.shares:
        if who == spec.user:
            shares = float(value)
    used = usage_hours.get(spec.user, 0.0) + running_slots.get(spec.user, 0)
    f = 1.0 / (1.0 + used / shares)
    s = min(1.0, spec.slots / scale.top_host_slots) if scale.top_host_slots > 0 else 0.0
    total = (
        settings.weight_queue * q
        + settings.weight_job * j
        + settings.weight_age * a
        + settings.weight_fairshare * f
        + settings.weight_size * s
    )
    return Factors(q, j, a, f, s, total)


def usage_of(
    usage: Mapping[str, float], running: Any, now: float
) -> tuple[dict[str, float], dict[str, int]]:
    """(user -> core-hours, user -> slots in use) from a snapshot's finished usage and its
    running jobs, as the scheduling pass counts them (xce/sched/passes/pipeline.py)."""
    seconds = dict(usage)
    slots: dict[str, int] = {}
    for job in running:
        slots[job.user] = slots.get(job.user, 0) + job.slots
        seconds[job.user] = seconds.get(job.user, 0.0) + job.slots * max(0.0, now - job.start_time)
    return {user: s / 3600.0 for user, s in seconds.items()}, slots
