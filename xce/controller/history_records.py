"""What the durable records say about the cluster history's past (xce/controller/
cluster_history.py): the moves ended attempts made to the figures, by step and queue.

A rebuild walks back from the figures at a term's start; each attempt that ended in the
window undoes, at its end, submit and start times, what it did then. Two sources give the
same moves by the same rules (a test holds them equal): the accounting store, added up by
SQLite over its end-time index in a thread (`ended_deltas`), and rows of finished jobs the
recovered state still holds, for a controller without accounting (`attempt_deltas`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from xce.accounting import store as acct_store
from xce.accounting.feed import AccountingFeed
from xce.accounting.record import REQUEUED

log = logging.getLogger("xce.controller.history")

# A delta per bucket and queue, as the rebuild adds them up:
# [pending, running, slots, gpus, submitted, finished].
Delta = list[int]
Deltas = dict[int, dict[str, Delta]]  # bucket k -> queue -> delta


def bucket(at: float, step: int) -> int:
    """The boundary k whose step (k-1, k] x step holds the instant `at` (the same rule as the
    SQL of `ended_deltas`: ceil, written so that SQLite computes it alike)."""
    return math.ceil(at / step)


def add_delta(
    deltas: Deltas, at: float, step: int, queue: str, values: tuple[int, ...], times: int = 1
) -> None:
    d = deltas.setdefault(bucket(at, step), {}).setdefault(queue, [0, 0, 0, 0, 0, 0])
    for i, v in enumerate(values):
        d[i] += v * times


def merge(into: Deltas, other: Deltas) -> None:
    for k, by in other.items():
        for queue, d in by.items():
            mine = into.setdefault(k, {}).setdefault(queue, [0, 0, 0, 0, 0, 0])
            for i, v in enumerate(d):
                mine[i] += v


def attempt_deltas(
    rows: Iterable[tuple[Any, ...]], lo: float, hi: float, step: int
) -> tuple[Deltas, float | None]:
    """What ended attempts did to the figures, by bucket: rows of (queue, attempt, submit,
    start, end, requeued, slots, gpus). The same rules as the SQL of `_read_store` (a test
    holds them equal): the first attempt's submission adds a pending job, a start moves it to
    running, an end takes it out (back to pending when requeued, finished otherwise)."""
    deltas: Deltas = {}
    first: float | None = None
    for queue, attempt, submit, start, end, requeued, slots, gpus in rows:
        if end is None or not lo < end <= hi:
            continue
        first = submit if first is None else min(first, submit)
        if attempt == 0 and lo < submit <= hi:
            add_delta(deltas, submit, step, queue, (1, 0, 0, 0, 1, 0))
        if start is not None:
            if lo < start <= hi:
                add_delta(deltas, start, step, queue, (-1, 1, slots, gpus, 0, 0))
            back = 1 if requeued else 0
            add_delta(deltas, end, step, queue, (back, -1, -slots, -gpus, 0, 1 - back))
        else:
            add_delta(deltas, end, step, queue, (-1, 0, 0, 0, 0, 1))
    return deltas, first


def _k(column: str) -> str:
    """`bucket()` in SQL: ceil(x / step) with CAST (which truncates) and a comparison."""
    return (
        f"(CAST({column} / :step AS INTEGER) + "
        f"({column} / :step > CAST({column} / :step AS INTEGER)))"
    )


_GPUS_SQL = (
    "req_gpus * (CASE WHEN hosts = '' THEN 1 "
    "ELSE length(hosts) - length(replace(hosts, ',', '')) + 1 END)"
)
_WINDOW = "end_time > :lo AND end_time <= :hi"  # the end-time index bounds every query


def read_store(
    feed: AccountingFeed, lo: float, hi: float, step: int, timeout: float
) -> tuple[Deltas, float | None]:
    """In a thread: wait until the feed has stored every durable record, then add up the
    attempts that ended in (lo, hi] by bucket and queue, in SQL."""
    if not feed.flush(timeout):
        log.warning("cluster history: the accounting store is behind; rebuilding from it anyway")
    return ended_deltas(feed.path, lo, hi, step)


def ended_deltas(path: Path, lo: float, hi: float, step: int) -> tuple[Deltas, float | None]:
    """The accounting store's share of a rebuild (the rules of `attempt_deltas`)."""
    if not path.exists():
        return {}, None
    conn = acct_store.connect(path, readonly=True)
    args = {"lo": lo, "hi": hi, "step": float(step), "requeued": REQUEUED}
    deltas: Deltas = {}
    try:
        first = conn.execute(f"SELECT min(submit_time) FROM attempts WHERE {_WINDOW}", args)
        (first_seen,) = first.fetchone()
        for queue, k, n in conn.execute(
            f"SELECT queue, {_k('submit_time')}, count(*) FROM attempts WHERE {_WINDOW} "
            "AND attempt = 0 AND submit_time > :lo AND submit_time <= :hi GROUP BY 1, 2",
            args,
        ):
            _add_at(deltas, k, queue, (n, 0, 0, 0, n, 0))
        for queue, k, n, slots, gpus in conn.execute(
            f"SELECT queue, {_k('start_time')}, count(*), sum(req_slots), sum({_GPUS_SQL}) "
            f"FROM attempts WHERE {_WINDOW} AND start_time > :lo AND start_time <= :hi "
            "GROUP BY 1, 2",
            args,
        ):
            _add_at(deltas, k, queue, (-n, n, slots or 0, gpus or 0, 0, 0))
        for queue, k, started, requeued, n, slots, gpus in conn.execute(
            f"SELECT queue, {_k('end_time')}, start_time IS NOT NULL, state = :requeued, "
            f"count(*), sum(req_slots), sum({_GPUS_SQL}) FROM attempts WHERE {_WINDOW} "
            "GROUP BY 1, 2, 3, 4",
            args,
        ):
            if started:
                back = n if requeued else 0
                _add_at(deltas, k, queue, (back, -n, -(slots or 0), -(gpus or 0), 0, n - back))
            else:
                _add_at(deltas, k, queue, (-n, 0, 0, 0, 0, n))
    finally:
        conn.close()
    return deltas, first_seen


def _add_at(deltas: Deltas, k: int, queue: str, values: tuple[int, ...]) -> None:
    d = deltas.setdefault(int(k), {}).setdefault(queue, [0, 0, 0, 0, 0, 0])
    for i, v in enumerate(values):
        d[i] += int(v)
