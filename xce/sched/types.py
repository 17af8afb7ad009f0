"""What a scheduling pass returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Placement:
    """Start `job_id` (a job or an array task id) on `host`."""

    job_id: str
    host: str
    devices: tuple[str, ...] = ()  # granted device ids, ("gpu:0", ...) (xce/sched/gres.py)


@dataclass(slots=True)
class Plan:
    """Placements to make now, and why each job left waiting waits (Slurm's Reason)."""

    placements: list[Placement] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    # EASY backfill: {"job_id", "host", "start"} of the reservation this pass kept, if any
    reservations: list[dict[str, Any]] = field(default_factory=list)
