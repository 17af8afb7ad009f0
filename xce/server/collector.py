"""The cyclic garbage collector's pace for the long-running roles (controller, standby,
worker).

CPython collects its youngest generation every 700 net allocations of container objects,
the next every 10 of those, and everything once the objects promoted since the last full
collection reach a quarter of the old ones. A request that waits (a worker's long poll of
20 s, a heartbeat queued behind others under load) lives through many young collections, so
its objects are promoted and then die old: each costs a walk in every generation, and the
full collections that such objects trigger walk the whole heap (every job record, every host,
every open connection). At 10,000 hosts (`python -m bench.load --workers 10000`) sampling the
controller found about a third of its time in the collector; the controller made half the
acknowledged submits of a run at the same CPU.

Reference counting frees almost everything the controller makes (records are immutable and
acyclic); the collector is there for the rare cycle. The youngest generation is collected
every `YOUNG` net allocations instead: request objects are then mostly freed by reference
counting before any collection sees them, and what a collection finds is what really lives
on. The older generations keep CPython's ratios. A cycle left behind waits at most `YOUNG`
container allocations (a few MiB) for its collection.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # CPython's default is 700


def pace_collector() -> None:
    """Collect the youngest generation every `YOUNG` net allocations (the others as CPython
    does): called once by a long-running role before it starts serving."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
