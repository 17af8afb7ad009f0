"""The primary's write lease: when a primary may still accept writes (fencing by silence).

A standby takes over once it has not heard the primary for `failover_timeout_s`; the primary
must have stopped writing before that. It holds its lease only while, within `lease_s`
(shorter than the failover timeout):

- its own ticker ran (a process frozen by SIGSTOP, a long GC or swap storm, comes back
  *suspect* and writes nothing until a probe round that started after the freeze has shown
  no newer primary), and
- it reached a majority of the candidates (itself included: a standby's replication ack or
  a probe answer counts), or, in a two-candidate cluster only, heard from a worker.

The worker rule is the trade-off: with two candidates a majority needs both, so without it
losing the standby would stop the cluster. Its price: a network partition that leaves the
primary with the workers and the standby alone can elect a second primary; the epochs fence
the lower one as soon as the two meet again, and its writes after the split are lost. Three
candidates avoid that: the majority rule alone then decides (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Lease:
    def __init__(
        self,
        candidates: int,
        lease_s: float,
        clock: Callable[[], float] = time.monotonic,
        contact: bool = True,
    ) -> None:
        """`contact`: the term began with contact (an election won by votes, a start); a
        lone claim (xce/ha/election.py) begins without, so it writes only once a worker
        or the other candidate reached it."""
        self.candidates = candidates
        self.lease_s = lease_s
        self.clock = clock
        now = clock()
        self.last_tick = now
        self.last_majority = now if contact else float("-inf")
        self.last_worker = float("-inf")
        self.suspect_since: float | None = None

    def tick(self) -> None:
        now = self.clock()
        if now - self.last_tick > self.lease_s and self.suspect_since is None:
            self.suspect_since = now
        self.last_tick = now

    def probed(self, reachable_others: int, started_at: float) -> None:
        """A probe round that began at `started_at` reached `reachable_others` candidates
        (none of them with a newer epoch: that would have made this node step down)."""
        if (reachable_others + 1) * 2 > self.candidates:
            self.last_majority = max(self.last_majority, started_at)
        if self.suspect_since is not None and started_at >= self.suspect_since:
            self.suspect_since = None

    def worker_contact(self) -> None:
        self.last_worker = self.clock()

    def refusal(self) -> str | None:
        """None while writes are allowed, otherwise why not."""
        if self.candidates <= 1:
            return None
        now = self.clock()
        if now - self.last_tick > self.lease_s or self.suspect_since is not None:
            return "this controller was paused; it is checking for a newer primary"
        if now - self.last_majority <= self.lease_s:
            return None
        if self.candidates == 2 and now - self.last_worker <= self.lease_s:
            return None
        return "this primary cannot reach a majority of the controller candidates" + (
            " or any worker" if self.candidates == 2 else ""
        )
