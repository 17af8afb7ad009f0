"""Accounting: one record per ended attempt, derived from events; the SQLite store, its
queries, idempotence and its rebuild from the WAL (real files, real recovery)."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from xce.accounting import store
from xce.accounting.feed import AccountingFeed
from xce.accounting.record import REQUEUED, AttemptWatch
from xce.core import events as ev
from xce.core.applier import Applier
from xce.core.arrayspec import parse_array_spec
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.core.state import ClusterState
from xce.store.durable import DurableLog, StoreSettings

SPEC = JobSpec("alice", "normal", command="x", slots=2, memory_mb=100, name="burn")
MIB = 1024 * 1024


def _cluster() -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    state.apply(ev.HostRegistered(0.0, "w1", 8, 1000))
    return state


def _run(state: ClusterState, watch: AttemptWatch, *events: ev.Event) -> list:
    out = []
    for event in events:
        watch.before(state, event)
        state.apply(event)
        record = watch.after(state, event, state.applied)
        if record is not None:
            out.append(record)
    return out


def test_each_ended_attempt_gives_one_record_with_usage_and_efficiency() -> None:
    state = _cluster()
    watch = AttemptWatch(lambda user: "physics")
    usage = Usage(cpu_user_s=3.0, cpu_system_s=1.0, max_rss_bytes=50 * MIB, wall_time_s=4.0)
    records = _run(
        state,
        watch,
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobUsageReported(3.0, "1", 0, Usage(1.0, 0.0, 10 * MIB, 1.0)),
        ev.JobRequeued(4.0, "1", "requeued by admin"),  # a running attempt requeued
        ev.JobStarted(5.0, "1", "w1"),
        ev.JobFinished(9.0, "1", 1, 0, None, usage),
        ev.JobSubmitted(10.0, 2, SPEC),
        ev.JobKilled(11.0, "2"),  # never started
    )
    first, second, killed = records
    assert (first.job_id, first.attempt, first.state) == ("1", 0, REQUEUED)
    assert (first.start_time, first.end_time, first.host, first.hosts) == (2.0, 4.0, "w1", "w1:2")
    assert first.cpu_user_s == 1.0 and first.max_rss_bytes == 10 * MIB  # last heartbeat's
    assert first.reason == "requeued by admin" and first.exit_code is None
    assert (second.attempt, second.state, second.exit_code) == (1, "DONE", 0)
    # the second attempt waited from its requeue (eligible again at 4.0), not from submit
    assert second.eligible_time == 4.0 and first.eligible_time == 1.0
    assert second.wait_s == 1.0 and second.wall_s == 4.0 and second.grp == "physics"
    assert second.cpu_eff == pytest.approx(4.0 / (2 * 4.0))
    assert second.mem_eff == pytest.approx(0.5)
    assert (second.name, second.user, second.queue, second.req_slots) == (
        "burn",
        "alice",
        "normal",
        2,
    )
    assert (killed.state, killed.start_time, killed.cpu_eff, killed.reason) == (
        "EXIT",
        None,
        None,
        "killed",
    )


def test_a_finished_attempt_requeued_later_is_not_recorded_twice() -> None:
    state = _cluster()
    records = _run(
        state,
        AttemptWatch(),
        ev.JobSubmitted(1.0, 1, SPEC),
        ev.JobStarted(2.0, "1", "w1"),
        ev.JobFinished(3.0, "1", 0, 1),
        ev.JobRequeued(4.0, "1"),
        ev.JobStarted(5.0, "1", "w1"),
        ev.JobHostLost(6.0, "1", True),
        ev.JobStarted(7.0, "1", "w1"),
        ev.JobHostLost(8.0, "1", False),
    )
    assert [(r.attempt, r.state) for r in records] == [(0, "EXIT"), (1, REQUEUED), (2, "EXIT")]
    assert records[2].reason == "host w1 became unavailable"


def test_array_tasks_each_get_a_record() -> None:
    state = _cluster()
    indices = parse_array_spec("1-3", 100).indices
    events: list[ev.Event] = [ev.ArraySubmitted(1.0, 1, SPEC, indices)]
    for i in (1, 2, 3):
        events += [ev.JobStarted(2.0, f"1[{i}]", "w1"), ev.JobFinished(3.0, f"1[{i}]", 0, 0)]
    records = _run(state, AttemptWatch(), *events)
    assert [(r.job_id, r.number, r.array_index) for r in records] == [
        ("1[1]", 1, 1),
        ("1[2]", 1, 2),
        ("1[3]", 1, 3),
    ]


def _records(n: int, user: str = "alice", start: float = 1000.0) -> list:
    state = _cluster()
    watch = AttemptWatch()
    out = []
    for i in range(n):
        number = state.next_number
        spec = JobSpec(user if i % 2 == 0 else "bob", "normal", command="x", slots=1)
        out += _run(
            state,
            watch,
            ev.JobSubmitted(start + i, number, spec),
            ev.JobStarted(start + i + 1, str(number), "w1"),
            ev.JobFinished(start + i + 11, str(number), 0, 0, None, Usage(5.0, 0.0, 1, 10.0)),
        )
    return out


def test_store_inserts_once_pages_filters_and_sums(tmp_path: Path) -> None:
    conn = store.connect(tmp_path / "acct.db")
    records = _records(10)
    assert store.insert(conn, records, 30) == 10
    assert store.insert(conn, records[:5], 40) == 0  # a replay: nothing twice
    assert store.position(conn) == 40
    page, cursor = store.list_attempts(conn, {}, None, 4, None)
    assert [r["job_id"] for r in page] == ["1", "2", "3", "4"] and cursor
    rest, end = store.list_attempts(conn, {}, None, 100, store.parse_cursor(cursor))
    assert len(rest) == 6 and end is None
    mine, _ = store.list_attempts(conn, {"user": ["alice"]}, None, 100, None)
    assert {r["user"] for r in mine} == {"alice"} and len(mine) == 5
    only, _ = store.list_attempts(conn, {}, ["bob"], 100, None)  # visibility
    assert {r["user"] for r in only} == {"bob"}
    none, _ = store.list_attempts(conn, {}, [], 100, None)
    assert none == []
    late, _ = store.list_attempts(conn, {"since": 1015.0}, None, 100, None)
    assert [r["end_time"] for r in late] == [1015.0 + i for i in range(6)]
    rows = {r["key"]: r for r in store.summary(conn, "user", {}, None)}
    assert rows["alice"]["jobs"] == 5 and rows["alice"]["core_hours"] == pytest.approx(50 / 3600)
    assert rows["alice"]["cpu_eff"] == pytest.approx(0.5)
    assert rows["bob"]["avg_wait_s"] == pytest.approx(1.0)


def test_retention_by_month(tmp_path: Path) -> None:
    conn = store.connect(tmp_path / "acct.db")
    now = 1_790_000_000.0  # 2026-09-21
    old = [
        replace(r, job_id=f"{r.job_id}0", end_time=r.end_time - 90 * 86400)
        for r in _records(2, start=now)
    ]
    store.insert(conn, old + _records(2, start=now), 1)
    assert store.month_cutoff(1, now) == 1_785_542_400.0  # 2026-08-01 00:00 UTC
    assert store.prune(conn, 0, now) == 0
    assert store.prune(conn, 1, now) == 2
    assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 2


def _log(state_dir: Path, feed: AccountingFeed | None = None) -> DurableLog:
    """The log as the controller opens it: recovery feeds `feed` (xce controller's own)."""
    observers = (feed,) if feed is not None else ()
    return DurableLog.open(state_dir, StoreSettings(segment_bytes=1 << 20, observers=observers))


async def _commit(
    log: DurableLog, state: ClusterState, feed: AccountingFeed, *events: ev.Event
) -> None:
    """As the service commits: through an applier with the feed (xce/core/applier.py)."""
    applier = Applier(state, (feed,))
    for event in events:
        applier.begin(event)
        log.append(log.prepare(event))
        applier.finish(event, state.applied)
    await log.sync()
    applier.durable(state.applied)


async def test_feed_rebuilds_from_the_wal_and_from_a_checkpoint(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    feed = AccountingFeed(state_dir)
    try:
        log = _log(state_dir, feed)
        state = log.recovered.state
        await _commit(
            log,
            state,
            feed,
            ev.QueueCreated(0.0, QueueRecord("normal")),
            ev.HostRegistered(0.0, "w1", 8, 1000),
        )
        for n in (1, 2, 3):
            await _commit(
                log,
                state,
                feed,
                ev.JobSubmitted(1.0, n, SPEC),
                ev.JobStarted(2.0, str(n), "w1"),
                ev.JobFinished(3.0, str(n), 0, 0),
            )
        assert feed.flush()
        await log.writer.close()
        feed.close(timeout=2.0)
        db = store.db_path(state_dir)
        # The store lost its last records (as a crash before its write would): a restart
        # derives them again from the WAL, and the ones it had are not doubled.
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM attempts WHERE job_id = '3'")
        feed = AccountingFeed(state_dir)
        log = _log(state_dir, feed)
        assert feed.flush()
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT job_id, count(*) FROM attempts GROUP BY 1").fetchall()
        assert sorted(rows) == [("1", 1), ("2", 1), ("3", 1)]
        # A checkpoint folds the events in; a store wiped after it is completed from the
        # checkpoint's finished jobs.
        await log.checkpoint(log.recovered.state)
        await log.writer.close()
        feed.close(timeout=2.0)
        os.unlink(db)
        feed = AccountingFeed(state_dir)
        log = _log(state_dir, feed)
        assert feed.flush()
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 3
        await log.writer.close()
    finally:
        feed.close(timeout=2.0)


async def test_a_failed_write_is_counted_and_retried(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "accounting").mkdir(mode=0o700)
    (state_dir / "accounting" / "acct.db").mkdir()  # a directory where the file belongs
    feed = AccountingFeed(state_dir)
    feed.start()
    try:
        records = _records(3)
        feed._staged.extend(records)
        feed.durable(99)
        assert not feed.flush(timeout=1.0)
        assert feed.stats["failures"] >= 1 and feed.backlog() == 3
        (state_dir / "accounting" / "acct.db").rmdir()  # the disk is fixed
        assert feed.flush(timeout=10.0)
        assert feed.stats["written"] == 3 and feed.position == 99
    finally:
        feed.close()


def test_summaries_from_rollups_equal_the_sums_of_the_records(tmp_path: Path) -> None:
    """Months and days from the rollups plus the ragged ends from the records give what
    summing every record gives (a state filter forces the records-only path)."""
    import random

    rng = random.Random(5)
    now = 1_790_000_000.0
    base = _records(40)
    records = [
        replace(
            r,
            job_id=f"{i}",
            end_time=now - rng.random() * 400 * 86400,
            host=None if i % 7 == 0 else f"h{i % 3}",
            queue=f"q{i % 4}",
        )
        for i, r in enumerate(base * 10)
    ]
    conn = store.connect(tmp_path / "acct.db")
    for i in range(0, len(records), 70):  # several batches: the rollups are upserted
        store.insert(conn, records[i : i + 70], i)
    store.insert(conn, records[:100], 999)  # a replay adds nothing to the rollups
    everything = ["DONE", "EXIT", "REQUEUED"]
    bounds = [
        (None, None),
        (now - 365 * 86400, None),
        (now - 200.5 * 86400, now - 3.2 * 86400),
        (now - 40 * 86400, now - 39.5 * 86400),
        (None, now - 100 * 86400),
    ]
    for by in store.GROUPS:
        for since, until in bounds:
            flt = {"since": since, "until": until}
            fast = store.summary(conn, by, flt, None)
            slow = store.summary(conn, by, {**flt, "state": everything}, None)
            assert [r["key"] for r in fast] == [r["key"] for r in slow], (by, since, until)
            for a, b in zip(fast, slow, strict=True):
                for k in a:
                    assert a[k] == pytest.approx(b[k]), (by, since, until, k)
    mine = store.summary(conn, "user", {"since": now - 90 * 86400}, ["bob"])
    assert [r["key"] for r in mine] == ["bob"]
    assert mine == store.summary(
        conn, "user", {"since": now - 90 * 86400, "state": everything}, ["bob"]
    )


async def test_batches_that_end_no_attempt_still_move_the_position(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    feed = AccountingFeed(state_dir)
    feed.start()
    try:
        feed._staged.extend(_records(1))
        feed.durable(10)
        for seq in (11, 12, 13):  # submits, starts...: no record, one coalesced entry
            feed.durable(seq)
        assert len(feed._queue) <= 2
        assert feed.flush()
        assert feed.position == 13
        with sqlite3.connect(store.db_path(state_dir)) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()[0] == 13
    finally:
        feed.close()


async def test_a_position_only_commit_takes_no_lock_and_never_passes_a_record(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "accounting").mkdir(mode=0o700)
    (state_dir / "accounting" / "acct.db").mkdir()  # the first writes fail
    feed = AccountingFeed(state_dir)

    class NoLock:
        def __enter__(self) -> None:
            raise AssertionError("a commit that staged nothing took the feed's lock")

        def __exit__(self, *exc: object) -> None:
            raise AssertionError

    real, feed._cond = feed._cond, NoLock()  # type: ignore[assignment]
    feed.durable(5)
    feed._cond = real
    assert not feed._queue and feed._latest == 5
    feed._staged.extend(_records(2))
    feed.durable(10)
    feed.durable(20)  # after the records: the position may pass them only once stored
    feed.start()
    try:
        assert not feed.flush(timeout=1.0)
        assert feed.stats["failures"] >= 1 and feed.position == 0 and feed.backlog() == 2
        (state_dir / "accounting" / "acct.db").rmdir()
        assert feed.flush(timeout=10.0)
        assert feed.stats["written"] == 2 and feed.position == 20
        feed._staged.extend(_records(1))
        feed.durable(30)
        feed.durable(25)  # a stale position never moves the store back
        assert feed.flush(timeout=10.0)
        assert feed.position == 30
        with sqlite3.connect(store.db_path(state_dir)) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()[0] == 30
    finally:
        feed.close()
