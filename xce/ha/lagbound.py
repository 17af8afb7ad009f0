"""Async replication's bound on exposure: how far a standby may trail what was acknowledged.

In async mode a change is acknowledged once it is durable on the primary; what no standby
holds yet is lost if the primary dies. Unbounded, that was hundreds of records under load.
With the bound, the primary acknowledges record `seq` only once an in-sync standby holds

- every record up to `seq - max_records` (`cluster.async_max_lag_records`), and
- every record that became durable here more than `max_ms` ago (`cluster.async_max_lag_ms`),

so a failover loses at most `max_records` acknowledged records, none of them acknowledged
while an older one than `max_ms` was still missing on the standby. Otherwise the commit waits
for the standby like sync mode does; if none answers within `sync_timeout_s` (or none is
connected) the bound is lifted with an ALERT until a standby is caught up again: a lone
survivor keeps serving writes (xce/ha/acks.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["LagBound"]


class LagBound:
    """The two limits (0: that limit is off) and the durable times they need."""

    def __init__(
        self, max_records: int, max_ms: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_records = max_records
        self.max_s = max_ms / 1000.0
        self.clock = clock
        self._durable: deque[tuple[int, float]] = deque()  # (last seq of a group, when)

    @property
    def enabled(self) -> bool:
        return self.max_records > 0 or self.max_s > 0

    def durable(self, seq: int) -> None:
        """A group of records up to `seq` is durable on the primary now."""
        if self.max_s > 0:
            self._durable.append((seq, self.clock()))

    def needed(self, seq: int, held: int) -> int:
        """The record a standby must hold before `seq` may be acknowledged, given that one
        holds `held` already (a result at or below `held`: acknowledge now)."""
        target = seq - self.max_records if self.max_records > 0 else 0
        if self.max_s > 0:
            while self._durable and self._durable[0][0] <= held:
                self._durable.popleft()
            cutoff = self.clock() - self.max_s
            for durable_seq, at in self._durable:
                if at > cutoff:
                    break
                target = max(target, durable_seq)
        return min(target, seq)
