"""Job number reservations (xce/controller/numbers.py): a number is used only from a block
that reached a standby, a new term starts above every earlier block, and two lone terms of
a two-candidate cluster never share a number."""

from __future__ import annotations

import copy

from xce.controller.numbers import NumberReserver
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState

SPEC = JobSpec(user="u", queue="normal", command="true")


class Primary:
    """A state, a commit that applies events, and a 'standby' that holds what replicate()
    confirmed: the highest reservation that reached it."""

    def __init__(self, state: ClusterState, lone_rank: int | None = None, block: int = 10):
        self.state = state
        self.replicated_ceiling = state.number_ceiling
        self.numbers = NumberReserver(
            state, self.commit, self.replicate, lambda: 1.0, block=block, lone_rank=lone_rank
        )
        self.used: list[int] = []

    async def commit(self, events: list[ev.Event]) -> None:
        for e in events:
            self.state.apply(e)

    async def replicate(self) -> None:
        self.replicated_ceiling = self.state.number_ceiling

    async def submit(self) -> int:
        await self.numbers.ready()
        n = self.state.next_number
        assert n <= self.replicated_ceiling, "a number used before its block reached a standby"
        self.state.apply(ev.JobSubmitted(1.0, n, SPEC))
        self.used.append(n)
        return n


def fresh() -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    return state


async def test_numbers_come_from_replicated_blocks_reserved_ahead() -> None:
    p = Primary(fresh())
    got = [await p.submit() for _ in range(35)]
    assert got == list(range(1, 36))  # contiguous within one term
    assert p.state.number_ceiling >= 36  # the next block is reserved while half is unused


async def test_a_new_term_numbers_above_every_block_it_inherits() -> None:
    old = Primary(fresh())
    for _ in range(12):
        await old.submit()
    standby = copy.deepcopy(old.state)  # what the standby held at the failover
    for _ in range(3):
        await old.submit()  # acknowledged, then lost with the old primary (async)
    lost = old.used[-3:]
    inherited = standby.number_ceiling
    new = Primary(standby)
    after = [await new.submit() for _ in range(5)]
    assert not set(after) & set(old.used), (after, lost)
    assert min(after) > inherited  # above the highest mark it inherited: the lost stay gaps


async def test_two_lone_terms_from_one_log_never_share_a_number() -> None:
    base = Primary(fresh())
    for _ in range(7):
        await base.submit()
    a = Primary(copy.deepcopy(base.state), lone_rank=0)
    b = Primary(copy.deepcopy(base.state), lone_rank=1)
    for _ in range(45):  # several blocks each
        await a.submit()
        await b.submit()
    assert not set(a.used) & set(b.used)
    assert not (set(a.used) | set(b.used)) & set(base.used)
