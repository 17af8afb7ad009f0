"""Accounting and eligible time: the record's wait counts from when the attempt became
eligible, and a store file of the first schema (no eligible_time) is migrated on open."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from xce.accounting import store
from xce.accounting.record import COLUMNS, AttemptWatch
from xce.core import events as ev
from xce.core.deps import parse_dependency
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState

SPEC = JobSpec("alice", "normal", command="x")


def _records(*events: ev.Event) -> list:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    state.apply(ev.HostRegistered(0.0, "w1", 8, 1000))
    watch, out = AttemptWatch(), []
    for event in events:
        watch.before(state, event)
        state.apply(event)
        record = watch.after(state, event, state.applied)
        if record is not None:
            out.append(record)
    return out


def test_wait_counts_from_the_dependency_hold_and_begin_time() -> None:
    first, dep, held, begun = _records(
        ev.JobSubmitted(10.0, 1, SPEC),
        ev.JobSubmitted(
            10.0,
            2,
            SPEC.__class__(**{**_fields(SPEC), "dependency": parse_dependency("afterok:1")}),
        ),
        ev.JobSubmitted(10.0, 3, SPEC.__class__(**{**_fields(SPEC), "hold": True})),
        ev.JobSubmitted(10.0, 4, SPEC.__class__(**{**_fields(SPEC), "begin_time": 100.0})),
        ev.JobStarted(20.0, "1", "w1"),
        ev.JobFinished(50.0, "1", 0, 0),
        ev.JobResumed(60.0, "3"),
        ev.JobStarted(70.0, "2", "w1"),
        ev.JobFinished(71.0, "2", 0, 0),
        ev.JobStarted(80.0, "3", "w1"),
        ev.JobFinished(81.0, "3", 0, 0),
        ev.JobStarted(130.0, "4", "w1"),
        ev.JobFinished(131.0, "4", 0, 0),
    )
    assert (first.eligible_time, first.wait_s) == (10.0, 10.0)
    assert (dep.eligible_time, dep.wait_s) == (50.0, 20.0)  # from its dependency's end
    assert (held.eligible_time, held.wait_s) == (60.0, 20.0)  # from the release
    assert (begun.eligible_time, begun.wait_s) == (100.0, 30.0)  # from its begin time


def _fields(spec: JobSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def _old_store(path: Path) -> None:
    """A store as the first schema wrote it: every column but eligible_time, one record."""
    old = [c for c in COLUMNS if c != "eligible_time"]
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE attempts ({', '.join(old)})")
    conn.execute("CREATE UNIQUE INDEX attempts_key ON attempts (job_id, attempt)")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value)")
    conn.execute("INSERT INTO meta VALUES ('schema', 1), ('position', 7)")
    row = {c: None for c in old} | {
        "job_id": "1",
        "attempt": 0,
        "number": 1,
        "name": "n",
        "user": "alice",
        "grp": "",
        "queue": "normal",
        "submit_time": 1.0,
        "start_time": 3.0,
        "end_time": 5.0,
        "wait_s": 2.0,
        "hosts": "w1:1",
        "state": "DONE",
        "reason": "",
        "resources": "",
        "req_slots": 1,
        "cpu_user_s": 0.0,
        "cpu_system_s": 0.0,
        "max_rss_bytes": 0,
        "wall_s": 2.0,
        "seq": 7,
    }
    conn.execute(
        f"INSERT INTO attempts VALUES ({', '.join('?' for _ in old)})", [row[c] for c in old]
    )
    conn.commit()
    conn.close()


def test_a_store_of_the_first_schema_is_read_then_migrated(tmp_path: Path) -> None:
    path = store.db_path(tmp_path)
    _old_store(path)
    # a read-only query before any writer opened it: the missing column reads None
    reader = store.connect(path, readonly=True)
    rows, _ = store.list_attempts(reader, {}, None, 10, None)
    assert rows[0]["job_id"] == "1" and rows[0]["eligible_time"] is None
    reader.close()
    conn = store.connect(path)  # the writer's open migrates
    columns = [r[1] for r in conn.execute("PRAGMA table_info(attempts)")]
    assert columns[-1] == "eligible_time"
    assert (
        conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        == store.SCHEMA_VERSION
    )
    assert store.position(conn) == 7
    (record,) = _records(ev.JobSubmitted(10.0, 1, SPEC), ev.JobKilled(12.0, "1"))
    record = replace(record, job_id="2", number=2)
    assert store.insert(conn, [record], 8) == 1
    by_id = {r["job_id"]: r for r in store.attempts_of(conn, "1") + store.attempts_of(conn, "2")}
    assert by_id["1"]["wait_s"] == 2.0 and by_id["1"]["eligible_time"] is None
    assert by_id["2"]["eligible_time"] == 10.0
    conn.close()
    again = store.connect(path)  # a second open changes nothing
    assert [r[1] for r in again.execute("PRAGMA table_info(attempts)")] == columns
    again.close()
