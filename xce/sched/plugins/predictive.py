"""Reserve `predictive`: EASY backfilling on run-time predictions (EASY++, Tsafrir, Etsion
and Feitelson 2007).

Requested times are poor: most jobs end long before them, so EASY on walltimes reserves the
blocked job too late and judges backfill candidates too long. Here the reservation is timed
by when the running jobs are *expected* to end (their predictions, xce/sched/predict.py,
extended while a job outlives its prediction; recomputed every pass), and a later job may
start now where its *predicted* end comes before the reserved start or it fits in what is
left over then. The queue's remaining jobs are tried shortest predicted first (SJBF), and
a queue that names no order plugin gets `short-first` (xce/sched/plugins/short_first.py).

Walltimes stay the kill limits. A starving job (the order's guard) gets its reservation by
walltimes instead, judged by walltimes too, so nothing started after it can delay it
(xce/sched/passes/place.py, `reserve_host`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xce.core.model import JobSpec
from xce.sched.passes.hostpool import HostPool
from xce.sched.passes.reservation import Reservation
from xce.sched.plugins.backfill import earliest_reservation


class PredictiveBackfill:
    name: ClassVar[str] = "predictive"
    kind: ClassVar[str] = "reserve"
    host_sets: ClassVar[bool] = True  # a multi-host job reserves a set of hosts
    blocks_queue: ClassVar[bool] = False
    predicts: ClassVar[bool] = True  # timed and judged by predictions
    shortest_first: ClassVar[bool] = True  # backfill candidates shortest predicted first
    default_order: ClassVar[str] = "short-first"

    def reserve(
        self, pool: HostPool, hosts: Sequence[int], spec: JobSpec, now: float
    ) -> Reservation | None:
        # `pool.releases` answers by expected ends while the pass reserves for this plugin
        # (`HostPool.expecting`), by walltimes for a starving job
        return earliest_reservation(pool, hosts, spec)
