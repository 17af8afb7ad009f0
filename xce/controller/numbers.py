"""Job numbers that are never handed out twice, across failovers too.

A primary with standbys hands out numbers only from a reserved block (`JobNumbersReserved`,
an event like any other: applied, logged, replicated, replayed). A block is replicated to a
standby before its first number is used, whatever the replication mode, and the next block
is reserved while half of the current one is still unused, so submissions rarely wait. A
new term's first block starts above the highest number reserved in the log it inherits: a
job that an async failover lost leaves its number a gap, and a client holding that number
can never reach another user's job with it.

Without standbys (a single controller) nothing is reserved: there is no failover to guard
against, and the log stays as it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from xce.core import events as ev
from xce.core.state import ClusterState

log = logging.getLogger("xce.controller")
NUMBER_BLOCK = 1000


class NumberReserver:
    def __init__(self, state: ClusterState, commit: Callable[[list[ev.Event]], Awaitable[None]],
                 replicate: Callable[[], Awaitable[None]], clock: Callable[[], float],
                 block: int = NUMBER_BLOCK) -> None:
        self.state = state
        self.commit = commit
        self.replicate = replicate
        self.clock = clock
        self.block = block
        self.confirmed = 0  # numbers up to here are reserved on a standby too (this term)
        self._pending: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        """Return when `state.next_number` may be handed out (no await after this may
        come before the submission's commit applies it)."""
        while True:
            n = self.state.next_number
            if n <= self.confirmed:
                if n > self.confirmed - self.block // 2 and self._pending is None:
                    self._start()  # the next block, ahead of use
                return
            if self._pending is None:
                self._start()
            assert self._pending is not None
            await asyncio.shield(self._pending)

    def _start(self) -> None:
        task = asyncio.get_running_loop().create_task(self._reserve())
        self._pending = task

        def done(t: asyncio.Task[None]) -> None:
            if self._pending is t:
                self._pending = None
            if not t.cancelled() and t.exception() is not None:
                log.warning("reserving job numbers failed: %s", t.exception())

        task.add_done_callback(done)

    async def _reserve(self) -> None:
        state = self.state
        if self.confirmed == 0:  # the term's first block: above every earlier reservation
            first = max(state.next_number, state.number_ceiling + 1)
            last = first + self.block - 1
        else:
            first = state.next_number
            last = max(state.number_ceiling, first - 1) + self.block
        await self.commit([ev.JobNumbersReserved(self.clock(), first, last)])
        await self.replicate()
        self.confirmed = last
        if first > state.number_ceiling - self.block:  # not logged for every extension
            log.info("job numbers %d..%d reserved", first, last)


def reserver_for(service: Any, store: Any) -> NumberReserver:
    """The reserver of a primary with standbys: `store.sync_replicated` waits for a standby
    in async mode too."""
    return NumberReserver(service.state, lambda events: service.commit(events, False),
                          store.sync_replicated, service.clock)
