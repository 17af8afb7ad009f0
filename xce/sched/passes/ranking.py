"""How hosts are ranked for a job: its `order[]` keys, then the queue's score plugin.

Keys are flat tuples (each `order[]` key contributes four values, see
`xce.sched.expr.order_key`), because flat tuples compare fastest in the candidate heaps.
The parts that come from static attributes are computed once per host; `slots` and `mem`
(free, this pass) are filled in on each call.
"""

from __future__ import annotations

from collections.abc import Callable

from xce.sched.expr import And, Compare, Name, Node, Not, Or, ResourceRequirement, order_key
from xce.sched.passes.hostpool import HostPool
from xce.sched.plugins.base import ScorePlugin, ranks

FREE_ATTRIBUTES = frozenset({"slots", "mem"})


def select_names(node: Node | None) -> set[str]:
    """Attribute names a select expression reads."""
    if node is None:
        return set()
    if isinstance(node, And | Or):
        return set().union(*(select_names(i) for i in node.items))
    if isinstance(node, Not):
        return select_names(node.item)
    if isinstance(node, Compare):
        return {o.name for o in (node.left, node.right) if isinstance(o, Name)}
    return {node.name}


def key_function(
    pool: HostPool, req: ResourceRequirement | None, score: ScorePlugin
) -> tuple[Callable[[int], tuple], bool, bool]:
    """(key of host i, dynamic, improving) for the job's `order[]`, then the queue's score,
    then the host name (the heap entries end with the index)."""
    if req is None or not req.order:  # the queue's score alone (most jobs): no parsing
        dynamic = score.dynamic
        improving = dynamic and getattr(score, "improving", True)
        return (lambda i: score.key(pool, i)), dynamic, improving
    order = req.order
    free_keys = [
        (j, k.name == "slots", k.descending)
        for j, k in enumerate(order)
        if k.name in FREE_ATTRIBUTES
    ]
    dynamic = score.dynamic or bool(free_keys)
    improving = dynamic and (
        getattr(score, "improving", True) or any(not d for _, _, d in free_keys)
    )
    free_slots, free_mem = pool.free_slots, pool.free_mem
    if len(order) == 1 and free_keys and not ranks(score):
        # the common `order[-slots]` / `order[mem]`: always defined, so one number ranks
        _, is_slots, descending = free_keys[0]
        values = free_slots if is_slots else free_mem
        if descending:
            return (lambda i: (-values[i],)), dynamic, improving
        return (lambda i: (values[i],)), dynamic, improving
    static: dict[int, list] = {}
    # each order key is 4 values (missing, kind, number, text), flattened: flat tuples
    # compare faster than nested ones in the heap
    positions = [(4 * j + 2, is_slots, descending) for j, is_slots, descending in free_keys]

    def key(i: int) -> tuple:
        flat = static.get(i)
        if flat is None:
            flat = static[i] = [
                v for part in order_key(req, pool.static_attributes(i)) for v in part
            ]
        if positions:
            flat = flat[:]
            for at, is_slots, descending in positions:
                value = free_slots[i] if is_slots else free_mem[i]
                flat[at - 2 : at + 2] = (0, 0, -value if descending else value, "")
        return (*flat, *score.key(pool, i))

    return key, dynamic, improving
