"""The primary's write lease: when a primary may still accept writes (fencing by silence).

A standby takes over once it has not heard the primary for `failover_timeout_s` (F); the
primary must have stopped writing before that. It holds its lease only while

- its own ticker ran (a process frozen by SIGSTOP, a long GC or swap storm, comes back
  *suspect* and writes nothing until a probe round that started after the freeze has shown
  no newer primary), and
- a majority of the candidates (itself included) reached it within `lease_s` (half of F),
  each counted on its own: a standby's replication acknowledgement (its heartbeats come
  every `heartbeat_interval_s`, so this renews continuously, between probe rounds) or a
  probe answer that showed no newer epoch, timed from the start of that round; or
- with exactly two candidates only, a worker reached it within `worker_lease_s`.

**Why a majority lease never admits two writers.** Another candidate Q writes only in a
term it won with a majority of votes. Any two majorities share a candidate V, and V reached
P at most `lease_s` ago on P's clock. A standby that heard its primary within F votes for no
one else and does not campaign (xce/ha/campaign.py, `busy`); a candidate that answered P's
probe with P's epoch had granted no newer one by then. So Q cannot have won while P's lease
runs. An acknowledgement is stamped when it arrives, a moment after V heard P (one network
trip and V's fsync); the other half of F is the margin for that and for clock rates.
A frozen primary keeps no stale belief: contact times are absolute, so they expired during
the freeze, and the suspect rule above holds it until it has probed again.

**Two candidates.** A majority of two needs both, so without a further rule losing either
candidate would stop the cluster. The survivor therefore also writes while a worker reached
it within `worker_lease_s`: the workers' heartbeat interval plus F, so that the lease never
lapses between two heartbeats of a live worker (with half of F it did, and the survivor
refused most writes). No crash, restart or pause makes two writers of this: the other
candidate takes over only after F without hearing this one, a stopped or frozen primary
writes nothing, and one that comes back is suspect until it has probed and seen the newer
epoch. Only a network partition in which the old primary still reaches workers (or its own
clients) and not the standby can leave both writing, in different epochs, until they meet
again: the lower epoch then steps down and its writes since the split are lost. That is the
two-candidate trade-off (docs/high-availability.md, Fencing); with three or more candidates
workers never count and the majority rule alone decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Lease"]


class Lease:
    """One term's lease. `candidates`: the cluster's candidate count; `lease_s`: how long a
    candidate's contact lets this primary write; `worker_lease_s`: how long a worker's
    request does, with exactly two candidates (default `lease_s`)."""

    def __init__(
        self,
        candidates: int,
        lease_s: float,
        clock: Callable[[], float] = time.monotonic,
        contact: bool = True,
        worker_lease_s: float | None = None,
    ) -> None:
        """`contact`: the term began with contact (an election won by votes, a start); a
        lone claim (xce/ha/election.py) begins without, so it writes only once a worker
        or the other candidate reached it."""
        self.candidates = candidates
        self.lease_s = lease_s
        self.worker_lease_s = lease_s if worker_lease_s is None else worker_lease_s
        self.clock = clock
        self.lone = not contact
        now = clock()
        self.last_tick = now
        self.last_majority = now if contact else float("-inf")
        self.reached_at: dict[str, float] = {}  # other candidate -> its latest contact
        self.last_worker = float("-inf")
        self.suspect_since: float | None = None

    # --- what renews it -----------------------------------------------------------------

    def tick(self) -> None:
        """The primary's ticker (every 0.1 s): a gap longer than `lease_s` was a freeze."""
        now = self.clock()
        if now - self.last_tick > self.lease_s and self.suspect_since is None:
            self.suspect_since = now
        self.last_tick = now

    def reached(self, candidate: str, at: float) -> None:
        """Candidate `candidate` reached this primary at `at` (this clock) or later, with no
        newer epoch: an acknowledgement's arrival, or the start of the probe round it
        answered."""
        if at > self.reached_at.get(candidate, float("-inf")):
            self.reached_at[candidate] = at

    def probed(self, started_at: float) -> None:
        """A probe round that began at `started_at` saw no newer epoch (one would have made
        this primary step down): a primary suspect since before that round is cleared."""
        if self.suspect_since is not None and started_at >= self.suspect_since:
            self.suspect_since = None

    def worker_contact(self) -> None:
        self.last_worker = self.clock()

    # --- what it allows -----------------------------------------------------------------

    def majority_since(self) -> float:
        """The time from which the contacts held make a majority with this primary: the
        `candidates // 2`-th most recent contact (or the term's start)."""
        needed = self.candidates // 2
        latest = sorted(self.reached_at.values(), reverse=True)
        counted = latest[needed - 1] if needed and len(latest) >= needed else float("-inf")
        return max(counted, self.last_majority)

    def supporters(self) -> int:
        """How many other candidates reached this primary within the lease."""
        now = self.clock()
        return sum(1 for at in self.reached_at.values() if now - at <= self.lease_s)

    def refusal(self) -> str | None:
        """None while writes are allowed, otherwise why not."""
        if self.candidates <= 1:
            return None
        now = self.clock()
        if now - self.last_tick > self.lease_s or self.suspect_since is not None:
            return "this controller was paused; it is checking for a newer primary"
        if now - self.majority_since() <= self.lease_s:
            return None
        if self.candidates == 2:
            if now - self.last_worker <= self.worker_lease_s:
                return None
            if self.lone and self.last_worker == float("-inf") and not self.reached_at:
                return (
                    "this controller claimed its epoch alone: it writes once a worker or "
                    "the other controller candidate reaches it"
                )
            return "this primary reaches neither the other controller candidate nor any worker"
        return (
            "this primary cannot reach a majority of the controller candidates "
            f"({self.supporters() + 1} of {self.candidates} reached)"
        )
