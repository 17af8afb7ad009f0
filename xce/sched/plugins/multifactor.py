"""Order `multifactor`: a queue's jobs by the weighted sum of xce/sched/priority.py
(queue, job priority, age, fairshare, size), highest first; ties keep submission order.

The factors are computed once per pass, before any job is placed (Slurm recomputes
priorities periodically too, not per placement).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import ClassVar

from xce.sched.plugins.base import Item, OrderContext
from xce.sched.priority import PrioritySettings, factors, scale_of


class Multifactor:
    name: ClassVar[str] = "multifactor"
    kind: ClassVar[str] = "order"
    submission_order: ClassVar[bool] = False
    reads_usage: ClassVar[bool] = True

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        snapshot = ctx.snapshot
        settings = snapshot.priority if snapshot is not None else PrioritySettings()
        queues = snapshot.queues if snapshot is not None else {ctx.queue.name: ctx.queue}
        hosts = [h.slots for h in snapshot.hosts] if snapshot is not None else []
        scale = scale_of(queues, hosts)
        keyed = [
            (
                -factors(
                    item.spec,
                    item.submit_time,
                    ctx.queue,
                    settings,
                    scale,
                    ctx.now,
                    ctx.usage_hours,
                    ctx.running_slots,
                ).priority,
                i,
                item,
            )
            for i, item in enumerate(items)
        ]
        keyed.sort(key=lambda row: (row[0], row[1]))
        for _, _, item in keyed:
            yield item
