"""Scores `first-fit` (the default: host name order), `pack` and `spread`.

A job's own `order[]` expression, when it has one, always ranks first; the queue's score
breaks its ties, then the host name.
"""

from __future__ import annotations

from typing import ClassVar

from xce.sched.passes.hostpool import HostPool


class FirstFit:
    name: ClassVar[str] = "first-fit"
    kind: ClassVar[str] = "score"
    dynamic: ClassVar[bool] = False
    improving: ClassVar[bool] = False
    ranks: ClassVar[bool] = False  # every key is (): host name order, nothing to sort

    def key(self, pool: HostPool, i: int) -> tuple:
        return ()


class Pack:
    """Fewest free slots first (then least free memory): fill busy hosts, keep others empty
    for big jobs."""

    name: ClassVar[str] = "pack"
    kind: ClassVar[str] = "score"
    dynamic: ClassVar[bool] = True
    ranks: ClassVar[bool] = True
    improving: ClassVar[bool] = True  # taking slots makes a host a tighter (better) fit

    def key(self, pool: HostPool, i: int) -> tuple:
        return (pool.free_slots[i], pool.free_mem[i])


class Spread:
    """Most free slots first (then most free memory): balance load across hosts."""

    name: ClassVar[str] = "spread"
    kind: ClassVar[str] = "score"
    dynamic: ClassVar[bool] = True
    ranks: ClassVar[bool] = True
    improving: ClassVar[bool] = False  # taking slots only makes a host worse

    def key(self, pool: HostPool, i: int) -> tuple:
        return (-pool.free_slots[i], -pool.free_mem[i])
