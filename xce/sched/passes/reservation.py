"""An EASY-backfill reservation: where and when the blocked head job will start.

Promise: once a reservation exists, a job placed later in the pass never delays it. A job
may go on another host, or on the reserved host if it ends (by its walltime) before the
reserved start, or if it uses only what the host will have left over at that time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Reservation:
    job_id: str
    host: int  # host index in the pass's HostPool
    host_name: str
    start: float
    extra_slots: int  # free at `start` beyond what the reserved job needs
    extra_mem: int

    def allows(
        self, i: int, slots: int, memory_mb: int, walltime_s: float | None, now: float
    ) -> bool:
        if i != self.host:
            return True
        if walltime_s is not None and now + walltime_s <= self.start:
            return True
        return slots <= self.extra_slots and memory_mb <= self.extra_mem

    def took(
        self, i: int, slots: int, memory_mb: int, walltime_s: float | None, now: float
    ) -> None:
        """Account for a job placed on host `i` that runs past the reserved start
        (`walltime_s`: how long it counts as running, its prediction under a reservation
        timed by predictions)."""
        if i == self.host and (walltime_s is None or now + walltime_s > self.start):
            self.extra_slots -= slots
            self.extra_mem -= memory_mb

    def describe(self) -> str:
        if self.host < 0:
            return "an earlier job waits and this queue is strictly first-come-first-served"
        return f"host {self.host_name} reserved from {self.start:.0f}"

    def to_plain(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "host": self.host_name, "start": self.start}
