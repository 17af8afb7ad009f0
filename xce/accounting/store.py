"""The accounting store: SQLite (standard library) in WAL mode on the controller's disk.

Chosen over an append-only file: the queries `xce acct` and `xce report` ask (by user, queue,
host, state, time range, grouped sums) are what SQLite's indexes and GROUP BY answer, and
it needs nothing installed. One table, `attempts`, one row per ended attempt, unique on
(job_id, attempt): inserts are `INSERT OR IGNORE`, so replaying the WAL after a crash, a
retry after a failed write, or a standby's own derivation never writes a record twice.

`meta.position` is the highest WAL record whose attempts are all stored: on start a store
behind the newest checkpoint is completed from the checkpoint's finished jobs.

Retention is by month, like LSF's `lsb.acct.N` rotation: `prune(months)` deletes records
that ended before the first day of the month `months` months back (0 keeps everything).

Connections: the writer thread owns one; every query opens its own read-only connection
(WAL mode lets readers run beside the writer), so the store is never touched from the
event loop.
"""

from __future__ import annotations

import calendar
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import astuple
from pathlib import Path
from typing import Any

from xce.accounting.record import COLUMNS, AcctRecord

SCHEMA_VERSION = 1
_TYPES = {
    "attempt": "INTEGER NOT NULL", "number": "INTEGER NOT NULL", "array_index": "INTEGER",
    "submit_time": "REAL NOT NULL", "start_time": "REAL", "end_time": "REAL NOT NULL",
    "wait_s": "REAL", "req_slots": "INTEGER", "req_memory_mb": "INTEGER",
    "req_walltime_s": "INTEGER", "req_gpus": "INTEGER", "exit_code": "INTEGER",
    "exit_signal": "INTEGER", "cpu_user_s": "REAL", "cpu_system_s": "REAL",
    "max_rss_bytes": "INTEGER", "wall_s": "REAL", "cpu_eff": "REAL", "mem_eff": "REAL",
    "seq": "INTEGER",
}
_INSERT = (f"INSERT OR IGNORE INTO attempts ({', '.join(COLUMNS)}) "
           f"VALUES ({', '.join('?' for _ in COLUMNS)})")


def db_path(state_dir: Path) -> Path:
    return state_dir / "accounting" / "acct.db"


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0,
                               check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable at WAL checkpoints; the WAL of
        # events is the truth, and a lost tail is re-derived from it on start
        _create(conn)
    conn.row_factory = sqlite3.Row
    return conn


def _create(conn: sqlite3.Connection) -> None:
    cols = ", ".join(f"{c} {_TYPES.get(c, 'TEXT')}" for c in COLUMNS)
    with conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS attempts ({cols})")
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS attempts_key "
                     "ON attempts (job_id, attempt)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_end ON attempts (end_time)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_user ON attempts (user, end_time)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_number ON attempts (number)")
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('position', 0)")


def insert(conn: sqlite3.Connection, records: Sequence[AcctRecord], position: int) -> int:
    """Store `records` in one transaction and move the position; returns rows added."""
    with conn:
        before = conn.total_changes
        conn.executemany(_INSERT, [astuple(r) for r in records])
        added = conn.total_changes - before
        conn.execute("UPDATE meta SET value = max(value, ?) WHERE key = 'position'",
                     (position,))
    return added


def position(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()
    return int(row[0]) if row else 0


def month_cutoff(months: int, now: float) -> float:
    """The first instant of the month `months` months before the one `now` is in (UTC)."""
    t = time.gmtime(now)
    index = t.tm_year * 12 + (t.tm_mon - 1) - months
    return float(calendar.timegm((index // 12, index % 12 + 1, 1, 0, 0, 0)))


def prune(conn: sqlite3.Connection, months: int, now: float) -> int:
    """Delete records that ended before the retention window (months = 0: keep all)."""
    if months <= 0:
        return 0
    with conn:
        cur = conn.execute("DELETE FROM attempts WHERE end_time < ?",
                           (month_cutoff(months, now),))
    return cur.rowcount


# --- queries ------------------------------------------------------------------------------

LIST_FILTERS = ("user", "grp", "queue", "state", "host", "name")


def _where(filters: dict[str, Any], users: Iterable[str] | None,
           time_field: str) -> tuple[str, list[Any]]:
    """The WHERE clause of both queries. `users`: the owners the caller may see (None: all)."""
    terms: list[str] = []
    args: list[Any] = []
    for key in LIST_FILTERS:
        values = filters.get(key)
        if values:
            terms.append(f"{key} IN ({', '.join('?' for _ in values)})")
            args.extend(values)
    if filters.get("job_id"):
        terms.append("job_id = ?")
        args.append(filters["job_id"])
    if filters.get("number") is not None:
        terms.append("number = ?")
        args.append(filters["number"])
    if filters.get("since") is not None:
        terms.append(f"{time_field} >= ?")
        args.append(filters["since"])
    if filters.get("until") is not None:
        terms.append(f"{time_field} < ?")
        args.append(filters["until"])
    if users is not None:
        allowed = list(users)
        terms.append(f"user IN ({', '.join('?' for _ in allowed)})" if allowed else "0")
        args.extend(allowed)
    return (" WHERE " + " AND ".join(terms)) if terms else "", args


def list_attempts(conn: sqlite3.Connection, filters: dict[str, Any],
                  users: Iterable[str] | None, limit: int, after: tuple[float, int] | None,
                  time_field: str = "end_time") -> tuple[list[dict[str, Any]], str | None]:
    """Records in (time, rowid) order from `after`; returns them and the next cursor."""
    where, args = _where(filters, users, time_field)
    if after is not None:
        where += (" AND " if where else " WHERE ") + f"({time_field}, rowid) > (?, ?)"
        args.extend(after)
    rows = conn.execute(f"SELECT rowid AS _row, * FROM attempts{where} "
                        f"ORDER BY {time_field}, rowid LIMIT ?", (*args, limit + 1)).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    out = [{k: row[k] for k in COLUMNS} for row in rows]
    cursor = None
    if more and rows:
        cursor = f"{rows[-1][time_field]!r}:{rows[-1]['_row']}"
    return out, cursor


def parse_cursor(text: str) -> tuple[float, int]:
    when, _, row = text.rpartition(":")
    return float(when), int(row)


GROUPS = {
    "user": "user", "group": "grp", "queue": "queue", "host": "host",
    "day": "date(end_time, 'unixepoch')", "month": "strftime('%Y-%m', end_time, 'unixepoch')",
}


def summary(conn: sqlite3.Connection, by: str, filters: dict[str, Any],
            users: Iterable[str] | None, time_field: str = "end_time") -> list[dict[str, Any]]:
    """Core-hours, attempts, jobs, wait and efficiency per `by` key (sreport, bacct -u)."""
    where, args = _where(filters, users, time_field)
    key = GROUPS[by]
    sql = (
        f"SELECT {key} AS key, count(*) AS attempts, "
        "count(DISTINCT CASE WHEN state != 'REQUEUED' THEN job_id END) AS jobs, "
        "sum(CASE WHEN state = 'DONE' THEN 1 ELSE 0 END) AS done, "
        "sum(CASE WHEN state = 'EXIT' THEN 1 ELSE 0 END) AS exited, "
        "sum(req_slots * wall_s) / 3600.0 AS core_hours, "
        "sum(cpu_user_s + cpu_system_s) / 3600.0 AS cpu_hours, "
        "avg(wait_s) AS avg_wait_s, max(wait_s) AS max_wait_s, "
        "sum(cpu_user_s + cpu_system_s) / nullif(sum(req_slots * wall_s), 0) AS cpu_eff, "
        "avg(mem_eff) AS mem_eff "
        f"FROM attempts{where} GROUP BY 1 ORDER BY core_hours DESC, key"
    )
    return [dict(row) for row in conn.execute(sql, args)]


def owners(conn: sqlite3.Connection) -> list[str]:
    """Every user with a record (the index makes this a skip over user names)."""
    return [r[0] for r in conn.execute("SELECT DISTINCT user FROM attempts")]


def attempts_of(conn: sqlite3.Connection, job_id: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,))
    return [{k: row[k] for k in COLUMNS} for row in rows]
