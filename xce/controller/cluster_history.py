"""The cluster's recent history: what ran, waited, was held and came and went, every
`[controller] history_step_s`, in a fixed ring covering 24 h (`GET /api/v1/cluster/history`,
the console's charts).

What one sample holds, at t = k x step (k an integer, so every controller and every restart
puts its samples at the same instants), for the cluster and for each queue:

- gauges at the instant t: `running` (jobs and tasks started and not ended: RUN, USUSP,
  SSUSP), `pending` (PEND and PSUSP jobs, and an array's tasks that have not started),
  `slots_busy` and `gpus_busy` (what those running jobs hold), `slots_total` and
  `gpus_total` (the slots and GPUs of the reachable hosts; for a queue, of the hosts it may
  use);
- counters over (t - step, t]: `submitted` (each job and each array task) and `finished`
  (jobs and tasks that ended DONE or EXIT: a requeue is not an end).

Why a ring of fixed arrays: its memory is one 8-byte cell per field, slot and series
(cluster plus one per queue), decided by `history_step_s` alone; it does not grow with
hosts, jobs or uptime (1,441 slots x 8 fields x 8 bytes = 92 KB per series at the default
60 s). The figures come from counters the ring keeps itself, moved by every applied event
(it is an observer of the service's applier, xce/core/applier.py), so a sample costs
O(queues), never a walk of jobs or hosts; only the totals walk the hosts, and only after a
host or queue changed.

Why exact: a boundary t is closed by the first event stamped after t (so a sample holds
exactly the events stamped up to t, however late the timer fires), or by the timer when
nothing happens. An event applied after a boundary it is stamped before (a scheduling pass
that read the clock before a boundary and committed after it) corrects the samples it
belongs to. Every figure is then a function of the events' own times, which the durable
records keep, and that is what a restart relies on.

Restart and failover: the ring is neither persisted nor replicated. Each primary term
(a restart, or a standby promoted by a failover) rebuilds it from the durable records:
the recovered state (jobs still held: pending, running, finished within retention) and the
accounting store (xce/accounting: one record per ended attempt, which a standby derives
from the replicated events too). Walking back from the figures of the recovered state, each
record undoes what its attempt did at its submit, start and end times, giving the figures at
every earlier boundary; the counters come from the same times. The aggregation is done by
SQLite (GROUP BY over the end-time index) in a thread (xce/controller/history_records.py),
so the rebuild costs the event loop O(jobs held) once per term. Two things the records do
not keep are approximated: the totals before the restart are the hosts as recovered (host
changes are not accounting records), and a job moved to another queue (`xce job modify
-q`) counts in its last queue. Without accounting (`accounting = false`) only the jobs the
state still holds are seen.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
from array import array
from collections.abc import Callable
from typing import Any

from xce.accounting.feed import AccountingFeed
from xce.controller.history_records import (
    Deltas,
    add_delta,
    attempt_deltas,
    bucket,
    merge,
    read_store,
)
from xce.core import events as ev
from xce.core import gres
from xce.core.model import HostRecord, JobRecord, JobSpec, QueueRecord
from xce.core.state import ClusterState

log = logging.getLogger("xce.controller.history")

WINDOW_S = 86_400  # the ring covers at least this much
GAUGES = ("running", "pending", "slots_busy", "slots_total", "gpus_busy", "gpus_total")
COUNTERS = ("submitted", "finished")
FIELDS = (*GAUGES, *COUNTERS)
_NF = len(FIELDS)
_RUNNING, _PENDING, _SLOTS_BUSY, _SLOTS_TOTAL, _GPUS_BUSY, _GPUS_TOTAL = range(6)
_SUBMITTED, _FINISHED = 6, 7
# A tally (the figures at this instant) per queue: [pending, running, slots, gpus].
_T_PEND, _T_RUN, _T_SLOTS, _T_GPUS = range(4)

# (queue, pending, running, slots, gpus, finished) of one job record or array (or None)
_Part = tuple[str, int, int, int, int, bool] | None
_ARRAY_EVENTS = (ev.ArraySubmitted, ev.ArrayHeld, ev.ArrayReleased, ev.ArrayCancelled)
_TOTALS_EVENTS = (
    ev.HostRegistered,
    ev.HostOpened,
    ev.HostClosed,
    ev.HostDrainStarted,
    ev.HostUnavailable,
    ev.HostAvailable,
    ev.QueueCreated,
    ev.QueueModified,
    ev.QueueDeleted,
)


def gpus_of(spec: JobSpec, hosts: int) -> int:
    """GPUs an attempt holds: `--gpus N` is N per host (xce/core/gres.py), as the
    accounting record's `req_gpus` times its hosts says it too."""
    return gres.counts_of(spec.gres).get("gpu", 0) * max(hosts, 1) if spec.gres else 0


def _job_part(job: JobRecord | None) -> _Part:
    if job is None:
        return None
    state = job.state
    if state.active:
        spec = job.spec
        hosts = len(job.allocation) or 1
        return (spec.queue, 0, 1, spec.slots, gpus_of(spec, hosts), False)
    if state.waiting:
        return (job.spec.queue, 1, 0, 0, 0, False)
    return (job.spec.queue, 0, 0, 0, 0, True)


def queue_allows(queue: QueueRecord, host: HostRecord) -> bool:
    """The `queue-hosts` filter's rule (xce/sched/plugins/hostfilters.py): listed by name,
    or `@group` of its `group` attribute; every host when the queue lists none."""
    if not queue.hosts or host.name in queue.hosts:
        return True
    group = host.attribute("group")
    return group is not None and f"@{group}" in queue.hosts


def host_gpus(host: HostRecord) -> int:
    return len(gres.host_devices(host.gres).get("gpu", ())) if host.gres else 0


class _Series:
    """One set of fields over the ring's slots (the cluster's, or one queue's): a single flat
    array, slot-major, so a series is one object whatever its length."""

    __slots__ = ("values",)

    def __init__(self, slots: int) -> None:
        self.values = array("q", bytes(8 * slots * _NF))


class ClusterHistory:
    """The ring, its counters, the observer that moves them and the rebuild (module doc)."""

    def __init__(
        self,
        state: ClusterState,
        step_s: int,
        clock: Callable[[], float],
        window_s: int = WINDOW_S,
    ) -> None:
        if step_s < 1:
            raise ValueError("history_step_s must be at least 1")
        self.state = state
        self.step = int(step_s)
        self.clock = clock
        self.size = math.ceil(window_s / self.step) + 1
        self._ks = array("q", [-1]) * self.size  # which boundary each slot holds
        self.cluster = _Series(self.size)
        self.queues: dict[str, _Series] = {}
        self.tallies: dict[str, list[int]] = {}
        # counters of boundaries not closed yet: k -> queue -> [submitted, finished]
        self._open: dict[int, dict[str, list[int]]] = {}
        self._totals: dict[str, tuple[int, int]] | None = None  # "" is the cluster
        self._pre: list[_Part] = []
        # Since this term started, for the Prometheus counters (xce/api/metrics.py).
        self.submitted_total = 0
        self.finished_total = 0
        self.origin = clock()
        self.last = math.floor(self.origin / self.step)  # the newest boundary closed
        self.first = self.last + 1  # the oldest boundary that holds a sample
        self.rebuilt = False
        self._seed()
        self._base = {q: list(t) for q, t in self.tallies.items()}
        self._captured, self._first_seen, self._finished_rows = self._capture()

    # --- the figures now ------------------------------------------------------------------

    def _seed(self) -> None:
        """The tallies from the state as it is (recovered, or a test's): every job it holds
        and every array's pending tasks, once per term (`_capture` reads the same walk)."""
        state = self.state
        for queue in state.queues:
            self.tallies.setdefault(queue, [0, 0, 0, 0])
        for job in state.jobs.values():
            if not job.state.finished:
                self._add(_job_part(job), 1)
        for number in state.pending_arrays:
            self._add(self._part(state, number), 1)

    def _add(self, part: _Part, sign: int) -> None:
        if part is None:
            return
        tally = self.tallies.get(part[0])
        if tally is None:
            tally = self.tallies[part[0]] = [0, 0, 0, 0]
        tally[_T_PEND] += sign * part[1]
        tally[_T_RUN] += sign * part[2]
        tally[_T_SLOTS] += sign * part[3]
        tally[_T_GPUS] += sign * part[4]

    def totals(self) -> dict[str, tuple[int, int]]:
        """(slots, gpus) of the reachable hosts, for the cluster ("") and each queue;
        recomputed only after a host or queue event."""
        if self._totals is None:
            state = self.state
            hosts = [h for h in state.hosts.values() if h.reachable]
            cluster = (sum(h.slots for h in hosts), sum(host_gpus(h) for h in hosts))
            out = {"": cluster}
            for queue in state.queues.values():
                if not queue.hosts:
                    out[queue.name] = cluster
                else:
                    mine = [h for h in hosts if queue_allows(queue, h)]
                    out[queue.name] = (sum(h.slots for h in mine), sum(host_gpus(h) for h in mine))
            self._totals = out
        return self._totals

    def current(self) -> dict[str, dict[str, int]]:
        """The gauges now, for the cluster ("") and each queue (metrics, the console)."""
        totals = self.totals()
        out: dict[str, dict[str, int]] = {}
        whole = [0, 0, 0, 0]
        for queue, t in self.tallies.items():
            whole = [a + b for a, b in zip(whole, t, strict=True)]
            out[queue] = self._gauges(t, totals.get(queue, (0, 0)))
        out[""] = self._gauges(whole, totals[""])
        return out

    @staticmethod
    def _gauges(t: list[int], total: tuple[int, int]) -> dict[str, int]:
        return {
            "running": t[_T_RUN],
            "pending": t[_T_PEND],
            "slots_busy": t[_T_SLOTS],
            "slots_total": total[0],
            "gpus_busy": t[_T_GPUS],
            "gpus_total": total[1],
        }

    # --- the observer (xce/core/applier.py) -------------------------------------------------

    def _keys(self, state: ClusterState, event: ev.Event) -> tuple[str | int, ...]:
        """The job (str) and array (int) records whose figures `event` may move."""
        kind = type(event)
        if kind is ev.JobSubmitted:
            return (str(event.number),)  # type: ignore[attr-defined]
        if isinstance(event, _ARRAY_EVENTS):
            return (event.number,)
        job_id = getattr(event, "job_id", None)
        if not isinstance(job_id, str):
            return ()
        if job_id.endswith("]"):  # a task: its array's pending set moves with it
            head = job_id.partition("[")[0]
            return (job_id, int(head)) if head.isdigit() else (job_id,)
        if job_id.isdigit() and int(job_id) in state.arrays:
            return (job_id, int(job_id))
        return (job_id,)

    def _part(self, state: ClusterState, key: str | int) -> _Part:
        if isinstance(key, str):
            return _job_part(state.jobs.get(key))
        found = state.arrays.get(key)
        if found is None:
            return None
        return (found.spec.queue, len(found.pending), 0, 0, 0, False)

    def before(self, state: ClusterState, event: ev.Event) -> None:
        if type(event) is ev.JobUsageReported:
            return  # the most frequent event moves no figure
        try:
            if event.at > (self.last + 1) * self.step:
                self._close(bucket(event.at, self.step) - 1)
            self._pre = [self._part(state, k) for k in self._keys(state, event)]
        except Exception:  # a fault here must never fail a commit
            log.exception("cluster history: %s before apply", type(event).__name__)
            self._pre = []

    def after(self, state: ClusterState, event: ev.Event, seq: int) -> None:
        if type(event) is ev.JobUsageReported:
            return
        try:
            self._after(state, event)
        except Exception:
            log.exception("cluster history: %s after apply", type(event).__name__)
        self._pre = []

    def _after(self, state: ClusterState, event: ev.Event) -> None:
        if isinstance(event, _TOTALS_EVENTS):
            self._totals = None
        keys = self._keys(state, event)
        if not keys or len(keys) != len(self._pre):
            return
        k = bucket(event.at, self.step)
        late = k <= self.last  # stamped before a boundary already closed
        moved: dict[str, list[int]] = {}
        for key, pre in zip(keys, self._pre, strict=True):
            post = self._part(state, key)
            if pre == post:
                continue
            for part, sign in ((pre, -1), (post, 1)):
                if part is None:
                    continue
                self._add(part, sign)
                if late:
                    d = moved.setdefault(part[0], [0, 0, 0, 0])
                    d[_T_PEND] += sign * part[1]
                    d[_T_RUN] += sign * part[2]
                    d[_T_SLOTS] += sign * part[3]
                    d[_T_GPUS] += sign * part[4]
            if (
                isinstance(key, str)
                and post is not None
                and post[5]
                and (pre is None or not pre[5])
            ):
                self._count(post[0], k, _FINISHED, 1)
        if isinstance(event, ev.JobSubmitted):
            self._count(event.spec.queue, k, _SUBMITTED, 1)
        elif isinstance(event, ev.ArraySubmitted):
            self._count(event.spec.queue, k, _SUBMITTED, len(event.indices))
        elif isinstance(event, ev.ArrayCancelled) and self._pre[0] is not None:
            post = self._part(state, event.number)
            gone = self._pre[0][1] - (post[1] if post is not None else 0)
            if gone > 0:
                self._count(self._pre[0][0], k, _FINISHED, gone)
        for queue, d in moved.items():  # the closed samples this event belongs to
            self._correct(queue, k, d)

    def durable(self, seq: int) -> None:
        """Nothing to do: the ring is memory only (see the module docstring)."""

    def recovered(self, state: ClusterState, checkpoint_seq: int, last_seq: int) -> None:
        """Not used: a term's ring is made after recovery, from the recovered state."""

    def _count(self, queue: str, k: int, field: int, n: int) -> None:
        if field == _SUBMITTED:
            self.submitted_total += n
        else:
            self.finished_total += n
        if k <= self.last:  # a closed boundary: into its sample, if the ring still has it
            slot = k % self.size
            if self._ks[slot] == k:
                self._series(queue).values[slot * _NF + field] += n
                self.cluster.values[slot * _NF + field] += n
            return
        counts = self._open.setdefault(k, {}).setdefault(queue, [0, 0])
        counts[field - _SUBMITTED] += n

    def _correct(self, queue: str, k: int, d: list[int]) -> None:
        """Add a late event's moves to every closed sample from its boundary on."""
        series = self._series(queue)
        for kk in range(max(k, self.last - self.size + 1), self.last + 1):
            slot = kk % self.size
            if self._ks[slot] != kk:
                continue
            for values in (series.values, self.cluster.values):
                base = slot * _NF
                values[base + _PENDING] += d[_T_PEND]
                values[base + _RUNNING] += d[_T_RUN]
                values[base + _SLOTS_BUSY] += d[_T_SLOTS]
                values[base + _GPUS_BUSY] += d[_T_GPUS]

    # --- closing boundaries ---------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        """The timer: close every boundary up to `now` (the clock) that no event closed."""
        now = self.clock() if now is None else now
        self._close(math.floor(now / self.step))

    def _series(self, queue: str) -> _Series:
        found = self.queues.get(queue)
        if found is None:
            found = self.queues[queue] = _Series(self.size)
        return found

    def _close(self, k: int) -> None:
        """Close boundaries last+1..k with the figures now: no event stamped in between
        has applied (it would have closed them), so they are exact."""
        if k <= self.last:
            return
        start = max(self.last + 1, k - self.size + 1)
        totals = self.totals()
        for queue in self.state.queues:
            self._series(queue)
        for kk in range(start, k + 1):
            counts = self._open.pop(kk, {})
            for queue in counts:
                self._series(queue)
            whole = [0] * _NF
            for queue, series in self.queues.items():
                row = self._row(self.tallies.get(queue), totals.get(queue), counts.get(queue))
                self._write(series, kk, row)
                for i in (_RUNNING, _PENDING, _SLOTS_BUSY, _GPUS_BUSY, _SUBMITTED, _FINISHED):
                    whole[i] += row[i]
            whole[_SLOTS_TOTAL], whole[_GPUS_TOTAL] = totals[""]
            self._write(self.cluster, kk, whole)
            self._ks[kk % self.size] = kk
        for stale in [kk for kk in self._open if kk < start]:
            del self._open[stale]  # skipped over: older than the ring
        self.last = k
        self.first = max(self.first, k - self.size + 1)
        self._prune()

    @staticmethod
    def _row(
        tally: list[int] | None, total: tuple[int, int] | None, counts: list[int] | None
    ) -> list[int]:
        t = tally or [0, 0, 0, 0]
        slots_total, gpus_total = total or (0, 0)
        submitted, finished = counts or (0, 0)
        return [
            t[_T_RUN],
            t[_T_PEND],
            t[_T_SLOTS],
            slots_total,
            t[_T_GPUS],
            gpus_total,
            submitted,
            finished,
        ]

    def _write(self, series: _Series, k: int, row: list[int]) -> None:
        base = (k % self.size) * _NF
        series.values[base : base + _NF] = array("q", row)

    def _prune(self) -> None:
        """Drop the series of a deleted queue once nothing in the window mentions it."""
        for queue in [q for q in self.queues if q not in self.state.queues]:
            if not any(self.queues[queue].values) and not any(self.tallies.get(queue, ())):
                del self.queues[queue]
                self.tallies.pop(queue, None)

    # --- reading ----------------------------------------------------------------------------

    def samples(
        self, minutes: int | None = None, queue: str | None = None, step: int | None = None
    ) -> list[dict[str, Any]]:
        """The samples of the last `minutes` (all the ring holds when None), oldest first, of
        the cluster or of `queue`; with `step` (a multiple of the ring's step) aggregated as
        a ring of that step would have sampled them: gauges at each coarser boundary,
        counters summed over its step."""
        series = self.cluster if queue is None else self.queues.get(queue)
        if series is None:
            return []
        newest = self.last
        oldest = max(self.first, newest - self.size + 1)
        if minutes is not None:
            oldest = max(oldest, newest - (minutes * 60) // self.step + 1)
        values, ks, size = series.values, self._ks, self.size
        rows: list[dict[str, Any]] = []
        for k in range(oldest, newest + 1):
            slot = k % size
            if ks[slot] != k:
                continue
            base = slot * _NF
            row: dict[str, Any] = {"t": k * self.step}
            row.update(zip(FIELDS, values[base : base + _NF], strict=True))
            rows.append(row)
        if step is None or step == self.step:
            return rows
        return aggregate(rows, step)

    # --- the rebuild (module docstring) ------------------------------------------------------

    @property
    def _lo(self) -> float:
        """Only what happened after this instant can move a sample the ring can hold."""
        return float((math.floor(self.origin / self.step) - self.size + 1) * self.step)

    def _capture(self) -> tuple[Deltas, float | None, list[tuple[Any, ...]]]:
        """What the state at the start of the term says about the window: the submissions
        and starts of the jobs it still holds unfinished (their ends are after now), and the
        finished jobs it holds (used only without an accounting store). On the event loop,
        before anything else applies: O(jobs held), once per term."""
        lo, hi, step = self._lo, self.origin, self.step
        deltas: Deltas = {}
        first: float | None = None
        finished: list[tuple[Any, ...]] = []
        for job in self.state.jobs.values():
            spec = job.spec
            if job.state.finished:
                if job.end_time is not None and job.end_time > lo:
                    hosts = len(job.allocation) or 1
                    finished.append(
                        (
                            spec.queue,
                            job.attempt,
                            job.submit_time,
                            job.start_time,
                            job.end_time,
                            False,
                            spec.slots,
                            gpus_of(spec, hosts),
                        )
                    )
                continue
            first = job.submit_time if first is None else min(first, job.submit_time)
            if job.attempt == 0 and lo < job.submit_time <= hi:
                add_delta(deltas, job.submit_time, step, spec.queue, (1, 0, 0, 0, 1, 0))
            start = job.start_time
            if job.state.active and start is not None and lo < start <= hi:
                gpus = gpus_of(spec, len(job.allocation) or 1)
                add_delta(deltas, start, step, spec.queue, (-1, 1, spec.slots, gpus, 0, 0))
        for number in self.state.pending_arrays:
            found = self.state.arrays[number]
            n = len(found.pending)
            first = found.submit_time if first is None else min(first, found.submit_time)
            if n and lo < found.submit_time <= hi:
                add_delta(deltas, found.submit_time, step, found.spec.queue, (n, 0, 0, 0, n, 0))
        return deltas, first, finished

    async def rebuild(self, accounting: AccountingFeed | None, timeout: float = 30.0) -> None:
        """Fill the ring up to the term's start from the durable records (module docstring):
        the accounting store's ended attempts, read in a thread once the feed has stored what
        recovery derived, or the finished jobs the state holds when there is no store."""
        deltas = {k: {q: list(d) for q, d in by.items()} for k, by in self._captured.items()}
        first = self._first_seen
        ended: tuple[Deltas, float | None] | None = None
        if accounting is not None:
            try:
                ended = await asyncio.to_thread(
                    read_store, accounting, self._lo, self.origin, self.step, timeout
                )
            except (sqlite3.Error, OSError) as exc:
                log.warning(
                    "cluster history: the accounting store could not be read (%s); rebuilt "
                    "from the jobs the state holds only",
                    exc,
                )
        if ended is None:
            ended = attempt_deltas(self._finished_rows, self._lo, self.origin, self.step)
        merge(deltas, ended[0])
        if ended[1] is not None:
            first = ended[1] if first is None else min(first, ended[1])
        self.install(deltas, first)

    def install(self, deltas: Deltas, first: float | None) -> None:
        """Write the samples at every boundary from the first activity (or the ring's
        oldest slot) to the term's start, walking back from the figures at the start."""
        step = self.step
        top = math.floor(self.origin / step)
        if first is None:
            self.rebuilt = True
            return
        low = max(top - self.size + 1, bucket(first, step), self.last - self.size + 1)
        current = {q: list(t) for q, t in self._base.items()}
        totals = self.totals()
        queues = set(current) | {q for by in deltas.values() for q in by}
        for k in range(top, low - 1, -1):
            later = deltas.get(k + 1, {})
            for queue, d in later.items():
                t = current.setdefault(queue, [0, 0, 0, 0])
                for i in range(4):
                    t[i] -= d[i]
            slot = k % self.size
            if self._ks[slot] > top:
                continue  # the live ring got here first (a term older than its window)
            here = deltas.get(k, {})
            whole = [0] * _NF
            for queue in queues:
                t = [max(v, 0) for v in current.get(queue, [0, 0, 0, 0])]
                got = here.get(queue)
                row = self._row(t, totals.get(queue), [got[4], got[5]] if got else None)
                self._write(self._series(queue), k, row)
                for i in (_RUNNING, _PENDING, _SLOTS_BUSY, _GPUS_BUSY, _SUBMITTED, _FINISHED):
                    whole[i] += row[i]
            whole[_SLOTS_TOTAL], whole[_GPUS_TOTAL] = totals[""]
            self._write(self.cluster, k, whole)
            self._ks[slot] = k
        self.first = min(self.first, low)
        # Counters of the step the term started in: what happened before the start.
        for queue, d in deltas.get(top + 1, {}).items():
            for field, n in ((_SUBMITTED, d[4]), (_FINISHED, d[5])):
                if n:
                    self._count(queue, top + 1, field, n)
                    if field == _SUBMITTED:
                        self.submitted_total -= n  # not this term's
                    else:
                        self.finished_total -= n
        self.rebuilt = True
        log.info(
            "cluster history rebuilt from the durable records: %d samples of %d s",
            top - low + 1,
            step,
        )


def aggregate(rows: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """Samples of a finer step as a ring of `step` would hold them: the gauges of the sample
    at each boundary of `step`, the counters summed over (t - step, t]. A coarse step whose
    boundary sample is missing (the newest, not reached yet) is left out."""
    out: list[dict[str, Any]] = []
    counts: dict[int, list[int]] = {}
    ends: dict[int, dict[str, Any]] = {}
    for row in rows:
        k = bucket(row["t"], step)
        c = counts.setdefault(k, [0, 0])
        c[0] += row["submitted"]
        c[1] += row["finished"]
        if row["t"] == k * step:
            ends[k] = row
    for k in sorted(ends):
        row = dict(ends[k])
        row["submitted"], row["finished"] = counts[k]
        out.append(row)
    return out
