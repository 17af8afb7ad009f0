"""A whole-array kill leaves one accounting record per task that never started (EXIT, no
start), written in batches off the applying thread, and a replay writes none twice."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.unit.test_accounting import _commit, _log
from xce.accounting import feed as feed_module
from xce.accounting import store
from xce.accounting.feed import AccountingFeed
from xce.accounting.record import CancelledTasks, count
from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.model import JobSpec, QueueRecord

SPEC = JobSpec("alice", "normal", command="x", name="sweep")


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT job_id, attempt, state, start_time, end_time, reason, "
            "array_index, eligible_time FROM attempts ORDER BY rowid"
        ).fetchall()


async def test_killing_a_1000_task_array_records_each_task_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "BATCH", 300)  # several transactions for one kill
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    feed = AccountingFeed(state_dir)
    db = store.db_path(state_dir)
    try:
        log = _log(state_dir, feed)
        state = log.recovered.state
        await _commit(
            log,
            state,
            feed,
            ev.QueueCreated(0.0, QueueRecord("normal")),
            ev.HostRegistered(0.0, "w1", 8, 1000),
            ev.ArraySubmitted(1.0, 1, SPEC, parse_array_spec("1-1000").indices),
            ev.JobStarted(2.0, "1[1]", "w1"),
            ev.JobStarted(2.0, "1[2]", "w1"),
            ev.JobFinished(3.0, "1[1]", 0, 0),
        )
        started = time.perf_counter()
        feed.before(state, ev.ArrayCancelled(4.0, 1))
        state.apply(ev.ArrayCancelled(4.0, 1))
        log.append(log.prepare(ev.ArrayCancelled(4.0, 1)))
        feed.after(state, ev.ArrayCancelled(4.0, 1), state.applied)
        applying = time.perf_counter() - started
        staged = list(feed._staged)
        assert [type(s) for s in staged] == [CancelledTasks] and count(staged) == 998
        await log.sync()
        feed.durable(state.applied)
        await _commit(
            log,
            state,
            feed,
            ev.JobKillRequested(5.0, "1[2]"),
            ev.JobFinished(6.0, "1[2]", 0, None, 15),
        )
        assert feed.flush()
        rows = _rows(db)
        assert len(rows) == 1000 and len({(r[0], r[1]) for r in rows}) == 1000
        cancelled = [r for r in rows if r[3] is None]
        assert len(cancelled) == 998
        assert {r[6] for r in cancelled} == set(range(3, 1001))
        assert all(
            r[2] == "EXIT" and r[4] == 4.0 and r[5] == "killed" and r[7] == 1.0 for r in cancelled
        )
        assert feed.position == state.applied
        with sqlite3.connect(db) as conn:
            rolled = conn.execute(
                "SELECT sum(attempts), sum(exited) FROM rollup WHERE period = 'd' AND dim = 'all'"
            ).fetchone()
        assert rolled == (1000, 999)
        assert applying < 0.05, applying  # the loop's cost does not grow with the tasks
        await log.writer.close()
        feed.close(timeout=2.0)

        # The store lost half the kill's records (a crash before its write): the replay
        # of the WAL derives them again; none is doubled.
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM attempts WHERE array_index > 500 AND start_time IS NULL")
            conn.execute("UPDATE meta SET value = 0 WHERE key = 'position'")
        feed = AccountingFeed(state_dir)
        log = _log(state_dir, feed)
        assert feed.flush()
        again = _rows(db)
        assert len(again) == 1000 and len({(r[0], r[1]) for r in again}) == 1000
        await log.writer.close()
    finally:
        feed.close(timeout=2.0)


def test_a_kill_of_an_array_with_nothing_pending_leaves_nothing_more() -> None:
    from xce.accounting.record import AttemptWatch
    from xce.core.state import ClusterState

    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    state.apply(ev.ArraySubmitted(1.0, 1, SPEC, parse_array_spec("1-3").indices))
    watch = AttemptWatch()
    for event in (ev.ArrayCancelled(2.0, 1), ev.ArrayCancelled(3.0, 1)):
        watch.before(state, event)
        state.apply(event)
        found = watch.after(state, event, 1)
        if event.at == 2.0:
            assert isinstance(found, CancelledTasks) and len(found) == 3
            assert [r.job_id for r in found.records()] == ["1[1]", "1[2]", "1[3]"]
        else:
            assert found is None
