"""Job numbers that are never handed out twice, across failovers too.

A primary with standbys hands out numbers only from a reserved block (`JobNumbersReserved`,
an event like any other: applied, logged, replicated, replayed). A block is replicated to a
standby before its first number is used, whatever the replication mode, and the next block
is reserved while half of the current one is still unused, so submissions rarely wait. A
new term's first block starts above the highest number reserved in the log it inherits: a
job that an async failover lost leaves its number a gap, and a client holding that number
can never reach another user's job with it.

A term claimed alone (two candidates, the other unreachable: xce/ha/election.py) may run
beside a lone term of the other candidate that it cannot see, from the same inherited log.
Its blocks are therefore taken from its own class, block k with k % 2 == its rank: two lone
terms never hand out the same number, whatever reached whom.

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
    def __init__(
        self,
        state: ClusterState,
        commit: Callable[[list[ev.Event]], Awaitable[None]],
        replicate: Callable[[], Awaitable[None]],
        clock: Callable[[], float],
        block: int = NUMBER_BLOCK,
        lone_rank: int | None = None,
    ) -> None:
        self.state = state
        self.lone_rank = lone_rank
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
                ahead = n > self.confirmed - self.block // 2 and self.lone_rank is None
                if ahead and self._pending is None:
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

    def _class_block(self, above: int) -> tuple[int, int]:
        """The first block of this lone term's class that starts above `above`."""
        assert self.lone_rank is not None
        k = (above + self.block - 1) // self.block
        while k % 2 != self.lone_rank:
            k += 1
        return k * self.block + 1, (k + 1) * self.block

    async def _reserve(self) -> None:
        state = self.state
        if self.lone_rank is not None:  # a new block of its class once this one is used up
            first, last = self._class_block(max(state.number_ceiling, state.next_number - 1))
        elif self.confirmed == 0:  # the term's first block: above every earlier reservation
            first = max(state.next_number, state.number_ceiling + 1)
            last = first + self.block - 1
        else:  # the next block, contiguous, while part of this one is still unused
            first = state.next_number
            last = max(state.number_ceiling, first - 1) + self.block
        await self.commit([ev.JobNumbersReserved(self.clock(), first, last)])
        await self.replicate()
        self.confirmed = last
        if first > state.number_ceiling - self.block:  # not logged for every extension
            log.info("job numbers %d..%d reserved", first, last)


def reserver_for(service: Any, store: Any, lone_rank: int | None) -> NumberReserver:
    """The reserver of a primary with standbys: `store.sync_replicated` waits for a standby
    in async mode too. `lone_rank`: the rank of a primary whose term was claimed alone."""
    return NumberReserver(
        service.state,
        lambda events: service.commit(events, False),
        store.sync_replicated,
        service.clock,
        lone_rank=lone_rank,
    )
