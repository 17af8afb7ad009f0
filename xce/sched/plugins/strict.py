"""Reserve `strict`: classic first-come-first-served. Once a job fits nowhere, nothing
behind it in the order may start in this pass (no backfilling at all).

The live default (no reserve plugin) is greedier: later jobs that fit go ahead. `strict`
is the textbook FCFS baseline that backfilling is measured against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xce.core.model import JobSpec
from xce.sched.passes.hostpool import INFINITY, HostPool
from xce.sched.passes.reservation import Reservation


@dataclass(slots=True)
class BlockEverything(Reservation):
    """A reservation of the whole cluster from now on."""

    def allows(
        self, i: int, slots: int, memory_mb: int, walltime_s: float | None, now: float
    ) -> bool:
        return False

    def to_plain(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "host": "*", "start": None}


class StrictOrder:
    name: ClassVar[str] = "strict"
    kind: ClassVar[str] = "reserve"
    host_sets: ClassVar[bool] = False  # blocks everything, whatever the job
    blocks_queue: ClassVar[bool] = True

    def reserve(
        self, pool: HostPool, hosts: Sequence[int], spec: JobSpec, now: float
    ) -> Reservation | None:
        return BlockEverything("", -1, "*", INFINITY, 0, 0)
