"""Orders `fairshare` (by user) and `fairshare-group` (by group, then by user in the group).

Dynamic priority, as in LSF: `shares / (1 + usage_hours + slots_in_use)`, where
`usage_hours` is the decayed core-hours of finished jobs plus those of running ones
(xce/sched/usage.py), `slots_in_use` counts jobs placed earlier in this pass too, and
`shares` comes from the queue's `shares` table (`alice = 3`, `"@physics" = 2`; default 1).
The user (group) with the highest priority goes next; ties go to the earliest submission.
Each user's own jobs stay in submission order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Iterator
from typing import ClassVar

from xce.sched.plugins.base import Item, OrderContext


def shares_of(ctx: OrderContext) -> dict[str, float]:
    return {name: float(value) for name, value in ctx.queue.shares}


def user_priority(ctx: OrderContext, shares: dict[str, float], user: str) -> float:
    return shares.get(user, 1.0) / (
        1.0 + ctx.usage_hours.get(user, 0.0) + ctx.running_slots.get(user, 0)
    )


class _Users:
    """Per-user queues of items and a heap of users by priority."""

    def __init__(self, ctx: OrderContext, shares: dict[str, float]) -> None:
        self.ctx, self.shares = ctx, shares
        self.queues: dict[str, deque[Item]] = {}
        self.heap: list[tuple[float, int, str]] = []

    def add(self, item: Item) -> None:
        self.queues.setdefault(item.spec.user, deque()).append(item)

    def start(self) -> None:
        self.heap = [
            (-user_priority(self.ctx, self.shares, u), q[0].number, u)
            for u, q in self.queues.items()
        ]
        heapq.heapify(self.heap)

    def head(self) -> tuple[float, int] | None:
        return (self.heap[0][0], self.heap[0][1]) if self.heap else None

    def pop(self) -> tuple[str, Item]:
        _, _, user = heapq.heappop(self.heap)
        return user, self.queues[user].popleft()

    def requeue(self, user: str) -> None:
        """After the user's job was tried: back in the heap with its new priority."""
        rest = self.queues[user]
        if rest:
            heapq.heappush(
                self.heap, (-user_priority(self.ctx, self.shares, user), rest[0].number, user)
            )


class UserFairshare:
    name: ClassVar[str] = "fairshare"
    kind: ClassVar[str] = "order"
    submission_order: ClassVar[bool] = False
    reads_usage: ClassVar[bool] = True

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        users = _Users(ctx, shares_of(ctx))
        for item in items:
            users.add(item)
        users.start()
        while users.heap:
            user, item = users.pop()
            yield item
            users.requeue(user)


class GroupFairshare:
    name: ClassVar[str] = "fairshare-group"
    kind: ClassVar[str] = "order"
    submission_order: ClassVar[bool] = False
    reads_usage: ClassVar[bool] = True

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        shares = shares_of(ctx)
        groups: dict[str, _Users] = {}
        for item in items:
            group = ctx.group_of(item.spec.user)
            groups.setdefault(group, _Users(ctx, shares)).add(item)
        usage: dict[str, float] = {}
        for user, hours in ctx.usage_hours.items():
            group = ctx.group_of(user)
            usage[group] = usage.get(group, 0.0) + hours

        def priority(group: str) -> float:
            return shares.get(f"@{group}", 1.0) / (
                1.0 + usage.get(group, 0.0) + ctx.group_slots.get(group, 0)
            )

        heap = []
        for group, users in groups.items():
            users.start()
            heap.append((-priority(group), users.heap[0][1], group))
        heapq.heapify(heap)
        while heap:
            _, _, group = heapq.heappop(heap)
            users = groups[group]
            user, item = users.pop()
            yield item
            users.requeue(user)
            head = users.head()
            if head is not None:
                heapq.heappush(heap, (-priority(group), head[1], group))
