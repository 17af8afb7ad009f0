"""Run-time predictions rebuilt from the accounting store at a primary term's start.

The predictor (xce/sched/predict.py) averages each user's (and each user and job name's)
last two run times. Seeded from the recovered state alone, a user whose last jobs were
purged by retention would be predicted by the request again after a restart or a failover,
so a pass would reserve and backfill differently from the term before. The accounting store
keeps every ended attempt beyond retention (a standby derives its own copy from the
replicated events), so each term reads from it, in a thread, the newest runs the predictor
can use, and `RuntimeHistory.reseed` merges them with the finished jobs the state holds.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import TYPE_CHECKING

from xce.accounting import store as acct_store
from xce.accounting.feed import AccountingFeed
from xce.sched.predict import HISTORY, EndedRun

if TYPE_CHECKING:
    from xce.controller.service import ControllerService

log = logging.getLogger("xce.controller.predictions")

# The newest HISTORY runs of each user and of each (user, name): all the predictor reads.
_NEWEST = (
    "SELECT job_id, attempt, end_time, user, name, end_time - start_time FROM ("
    " SELECT job_id, attempt, end_time, start_time, user, name,"
    "  row_number() OVER (PARTITION BY user ORDER BY end_time DESC, job_id DESC) AS by_user,"
    "  row_number() OVER (PARTITION BY user, name ORDER BY end_time DESC, job_id DESC)"
    "   AS by_name"
    " FROM attempts WHERE state IN ('DONE', 'EXIT') AND start_time IS NOT NULL"
    ") WHERE by_user <= :keep OR by_name <= :keep"
)


def read_runs(feed: AccountingFeed, timeout: float) -> list[EndedRun]:
    """In a thread: once the feed has stored what recovery derived, the newest runs."""
    if not feed.flush(timeout):
        log.warning("predictions: the accounting store is behind; rebuilding from it anyway")
    if not feed.path.exists():
        return []
    conn = acct_store.connect(feed.path, readonly=True)
    try:
        rows = conn.execute(_NEWEST, {"keep": HISTORY}).fetchall()
    finally:
        conn.close()
    return [
        (str(job), int(attempt), float(end), str(user), str(name), max(0.0, float(run)))
        for job, attempt, end, user, name, run in rows
    ]


async def rebuild_predictions(
    service: ControllerService, accounting: AccountingFeed | None, timeout: float = 30.0
) -> None:
    """Reseed the service's predictor from the accounting store (nothing without one)."""
    if accounting is None:
        return
    try:
        runs = await asyncio.to_thread(read_runs, accounting, timeout)
    except (sqlite3.Error, OSError) as exc:
        log.warning("predictions: the accounting store could not be read (%s)", exc)
        return
    service.predictions.reseed(service.state, runs)
    service.schedule_needed.set()  # reservations follow the predictions read
