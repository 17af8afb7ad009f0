"""What a scheduling pass returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xce.core.fastinit import fast_init
from xce.core.model import HostSlots
from xce.sched.reasons import WaitReason


@fast_init
@dataclass(frozen=True, slots=True)
class Placement:
    """Start `job_id` (a job or an array task id) on `host`; a multi-host job also gets
    `hosts`, its whole allocation, first host = `host`."""

    job_id: str
    host: str
    devices: tuple[str, ...] = ()  # granted device ids, ("gpu:0", ...) (xce/sched/passes/gres.py)
    hosts: tuple[HostSlots, ...] = ()


@dataclass(slots=True)
class Plan:
    """Placements to make now, and why each job left waiting waits (Slurm's Reason; the
    text people read is `str(reason)`, or `texts()` for all)."""

    placements: list[Placement] = field(default_factory=list)
    reasons: dict[str, WaitReason] = field(default_factory=dict)
    # EASY backfill: {"job_id", "host", "start"} of the reservation this pass kept, if any
    reservations: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> dict[str, str]:
        """Every reason as people read it (job id -> text)."""
        return {key: str(reason) for key, reason in self.reasons.items()}
