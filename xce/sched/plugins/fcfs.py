"""Order `fcfs`: first come, first served (submission order; the default)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import ClassVar

from xce.sched.plugins.base import Item, OrderContext


class FirstComeFirstServed:
    name: ClassVar[str] = "fcfs"
    kind: ClassVar[str] = "order"
    submission_order: ClassVar[bool] = True
    reads_usage: ClassVar[bool] = False

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        del ctx
        return iter(items)
