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
import operator
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from xce.accounting.record import COLUMNS, AcctRecord

# 1: the first; 2: `eligible_time` appended (wait_s counts from it from then on);
# 3: `gpu_util_pct`, `gpu_mem_peak_bytes` appended (NVML figures).
SCHEMA_VERSION = 3
_TYPES = {
    "attempt": "INTEGER NOT NULL",
    "number": "INTEGER NOT NULL",
    "array_index": "INTEGER",
    "submit_time": "REAL NOT NULL",
    "start_time": "REAL",
    "end_time": "REAL NOT NULL",
    "wait_s": "REAL",
    "req_slots": "INTEGER",
    "req_memory_mb": "INTEGER",
    "req_walltime_s": "INTEGER",
    "req_gpus": "INTEGER",
    "exit_code": "INTEGER",
    "exit_signal": "INTEGER",
    "cpu_user_s": "REAL",
    "cpu_system_s": "REAL",
    "max_rss_bytes": "INTEGER",
    "wall_s": "REAL",
    "cpu_eff": "REAL",
    "mem_eff": "REAL",
    "seq": "INTEGER",
    "eligible_time": "REAL",
    "gpu_util_pct": "REAL",
    "gpu_mem_peak_bytes": "INTEGER",
}
_ROW = operator.attrgetter(*COLUMNS)  # a record as a row (dataclasses.astuple deep-copies)
_INSERT = (
    f"INSERT OR IGNORE INTO attempts ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)


# Rollups, as slurmdbd keeps them: sums per UTC day and per UTC month for each dimension
# ("all" is the whole cluster), so a summary over a year reads months, not a million rows.
_PERIOD_START = {
    "d": "CAST(end_time / 86400 AS INTEGER) * 86400.0",
    "m": "CAST(strftime('%s', end_time, 'unixepoch', 'start of month') AS REAL)",
}
_DIMS = {
    "all": "''",
    "user": "user",
    "group": "grp",
    "queue": "queue",
    "host": "coalesce(host, '')",
}
_SUMS = (
    "count(*), sum(state = 'DONE'), sum(state = 'EXIT'), sum(req_slots * wall_s), "
    "sum(cpu_user_s + cpu_system_s), sum(wait_s), count(wait_s), max(wait_s), "
    "sum(mem_eff), count(mem_eff)"
)
_ROLLUPS = [
    f"INSERT INTO rollup SELECT '{period}', {start}, '{dim}', {key}, {_SUMS} "
    "FROM attempts WHERE rowid > ? GROUP BY 2, 4 "
    "ON CONFLICT (period, dim, start, key) DO UPDATE SET "
    "attempts = attempts + excluded.attempts, done = done + excluded.done, "
    "exited = exited + excluded.exited, core_s = core_s + excluded.core_s, "
    "cpu_s = cpu_s + excluded.cpu_s, wait_sum = coalesce(wait_sum, 0) + "
    "coalesce(excluded.wait_sum, 0), wait_n = wait_n + excluded.wait_n, "
    "wait_max = max(coalesce(wait_max, excluded.wait_max), "
    "coalesce(excluded.wait_max, wait_max)), mem_sum = coalesce(mem_sum, 0) + "
    "coalesce(excluded.mem_sum, 0), mem_n = mem_n + excluded.mem_n"
    for period, start in _PERIOD_START.items()
    for dim, key in _DIMS.items()
]


def db_path(state_dir: Path) -> Path:
    return state_dir / "accounting" / "acct.db"


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, timeout=5.0, check_same_thread=False
        )
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable at WAL checkpoints; the WAL of
        # events is the truth, and a lost tail is re-derived from it on start
        conn.execute("PRAGMA cache_size=-32768")  # 32 MiB: the indexes' hot pages
        _create(conn)
    conn.row_factory = sqlite3.Row
    return conn


def _create(conn: sqlite3.Connection) -> None:
    cols = ", ".join(f"{c} {_TYPES.get(c, 'TEXT')}" for c in COLUMNS)
    with conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS attempts ({cols})")
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS attempts_key ON attempts (job_id, attempt)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_end ON attempts (end_time)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_user ON attempts (user, end_time)")
        conn.execute("CREATE INDEX IF NOT EXISTS attempts_number ON attempts (number)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS rollup (period TEXT NOT NULL, start REAL NOT NULL, "
            "dim TEXT NOT NULL, key TEXT NOT NULL, attempts INTEGER, done INTEGER, "
            "exited INTEGER, core_s REAL, cpu_s REAL, wait_sum REAL, wait_n INTEGER, "
            "wait_max REAL, mem_sum REAL, mem_n INTEGER, "
            "PRIMARY KEY (period, dim, start, key)) WITHOUT ROWID"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS owners (user TEXT PRIMARY KEY) WITHOUT ROWID")
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('position', 0)")
        _migrate(conn)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a store of an older schema up to this one, in the caller's transaction.

    Columns are only ever appended to `AcctRecord` (and so to `attempts`): an older store
    gets each missing one by `ALTER TABLE ... ADD COLUMN` (SQLite's cheap form: existing
    rows read NULL, nothing is rewritten), so a store of millions of records opens at once.
    Records already stored keep the wait they were stored with (counted from submit)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(attempts)")}
    for column in COLUMNS:
        if column not in have:
            conn.execute(f"ALTER TABLE attempts ADD COLUMN {column} {_TYPES.get(column, 'TEXT')}")
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema' AND value < ?",
        (SCHEMA_VERSION, SCHEMA_VERSION),
    )


def _record(row: sqlite3.Row) -> dict[str, Any]:
    """A stored row as the API gives it; a column a not yet migrated store lacks reads None
    (a read-only query may open a store before the writer migrated it)."""
    keys = row.keys()
    return {k: row[k] if k in keys else None for k in COLUMNS}


def insert(conn: sqlite3.Connection, records: Sequence[AcctRecord], position: int) -> int:
    """Store `records` in one transaction and move the position; returns rows added."""
    with conn:
        last = conn.execute("SELECT max(rowid) FROM attempts").fetchone()[0] or 0
        before = conn.total_changes
        conn.executemany(_INSERT, map(_ROW, records))
        added = conn.total_changes - before
        if added:  # only rows this batch added: a replayed record is never counted twice
            for sql in _ROLLUPS:
                conn.execute(sql, (last,))
            conn.execute(
                "INSERT OR IGNORE INTO owners SELECT DISTINCT user FROM attempts WHERE rowid > ?",
                (last,),
            )
        conn.execute("UPDATE meta SET value = max(value, ?) WHERE key = 'position'", (position,))
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
    cutoff = month_cutoff(months, now)
    with conn:
        cur = conn.execute("DELETE FROM attempts WHERE end_time < ?", (cutoff,))
        conn.execute("DELETE FROM rollup WHERE start < ?", (cutoff,))
    return cur.rowcount


# --- queries ------------------------------------------------------------------------------

LIST_FILTERS = ("user", "grp", "queue", "state", "host", "name")


def _where(
    filters: dict[str, Any], users: Iterable[str] | None, time_field: str
) -> tuple[str, list[Any]]:
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


def list_attempts(
    conn: sqlite3.Connection,
    filters: dict[str, Any],
    users: Iterable[str] | None,
    limit: int,
    after: tuple[float, int] | None,
    time_field: str = "end_time",
) -> tuple[list[dict[str, Any]], str | None]:
    """Records in (time, rowid) order from `after`; returns them and the next cursor."""
    where, args = _where(filters, users, time_field)
    if after is not None:
        where += (" AND " if where else " WHERE ") + f"({time_field}, rowid) > (?, ?)"
        args.extend(after)
    rows = conn.execute(
        f"SELECT rowid AS _row, * FROM attempts{where} ORDER BY {time_field}, rowid LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    out = [_record(row) for row in rows]
    cursor = None
    if more and rows:
        cursor = f"{rows[-1][time_field]!r}:{rows[-1]['_row']}"
    return out, cursor


def parse_cursor(text: str) -> tuple[float, int]:
    when, _, row = text.rpartition(":")
    return float(when), int(row)


GROUPS = {
    "user": "user",
    "group": "grp",
    "queue": "queue",
    "host": "coalesce(host, '')",
    "day": "date(end_time, 'unixepoch')",
    "month": "strftime('%Y-%m', end_time, 'unixepoch')",
}
_DIM_OF = {
    "user": "user",
    "group": "group",
    "queue": "queue",
    "host": "host",
    "day": "all",
    "month": "all",
}
_FILTER_OF = {"user": "user", "group": "grp", "queue": "queue", "host": "host"}
_RAW_SUMS = f"SELECT {{key}} AS key, {_SUMS} FROM attempts"
_ROLLED = (
    "SELECT {label} AS key, sum(attempts), sum(done), sum(exited), sum(core_s), "
    "sum(cpu_s), sum(wait_sum), sum(wait_n), max(wait_max), sum(mem_sum), sum(mem_n) "
    "FROM rollup WHERE period = ? AND dim = ? AND start >= ? AND start < ?"
)
_FINAL = (
    "SELECT key, sum(a) AS attempts, sum(d) + sum(e) AS jobs, sum(d) AS done, "
    "sum(e) AS exited, sum(c) / 3600.0 AS core_hours, sum(u) / 3600.0 AS cpu_hours, "
    "sum(ws) / nullif(sum(wn), 0) AS avg_wait_s, max(wm) AS max_wait_s, "
    "sum(u) / nullif(sum(c), 0) AS cpu_eff, sum(ms) / nullif(sum(mn), 0) AS mem_eff "
    "FROM ({parts}) GROUP BY key ORDER BY core_hours DESC, key"
)
FAR = 1e18  # an unbounded end of a period


def summary(
    conn: sqlite3.Connection,
    by: str,
    filters: dict[str, Any],
    users: Iterable[str] | None,
    time_field: str = "end_time",
) -> list[dict[str, Any]]:
    """Core-hours, attempts, jobs (DONE + EXIT), wait and efficiency per `by` key (sreport,
    bacct -u). Whole months and days come from the rollups and only the ragged ends of the
    period from the records, when the filters are on the grouping itself (or none);
    anything else (other filters, submit time) is summed from the records."""
    users = None if users is None else list(users)
    allowed = {"since", "until"} | ({_FILTER_OF[by]} if by in _FILTER_OF else set())
    used = {k for k, v in filters.items() if v is not None and v != []}
    if time_field != "end_time" or used - allowed or (users is not None and by != "user"):
        where, args = _where(filters, users, time_field)
        return _final(conn, _named(_RAW_SUMS.format(key=GROUPS[by]) + where + " GROUP BY 1"), args)
    keys: list[list[str]] = []
    if by in _FILTER_OF and filters.get(_FILTER_OF[by]):
        keys.append(list(filters[_FILTER_OF[by]]))
    if users is not None:
        keys.append(users)
    since = filters.get("since")
    until = filters.get("until")
    lo = -FAR if since is None else since
    hi = FAR if until is None else until
    d0 = -FAR if since is None else _ceil(since, 86400.0)
    d1 = FAR if until is None else _floor(until, 86400.0)
    sources: list[tuple[str, list[Any]]] = []
    if d0 >= d1:
        sources.append(_raw(by, lo, hi, keys))
    else:
        if lo < d0:
            sources.append(_raw(by, lo, d0, keys))
        if d1 < hi:
            sources.append(_raw(by, d1, hi, keys))
        m0 = d0 if d0 == -FAR else _month_ceil(d0)
        m1 = d1 if d1 == FAR else _month_floor(d1)
        if by != "day" and m0 < m1:
            sources += [
                _rolled(by, "d", d0, m0, keys),
                _rolled(by, "m", m0, m1, keys),
                _rolled(by, "d", m1, d1, keys),
            ]
        else:
            sources.append(_rolled(by, "d", d0, d1, keys))
    parts = " UNION ALL ".join(sql for sql, _ in sources)
    return _final(conn, parts, [a for _, args in sources for a in args])


def _final(conn: sqlite3.Connection, parts: str, args: list[Any]) -> list[dict[str, Any]]:
    return [dict(row) for row in conn.execute(_FINAL.format(parts=parts), args)]


def _in(column: str, keys: list[list[str]]) -> tuple[str, list[Any]]:
    sql, args = "", []
    for values in keys:
        sql += f" AND {column} IN ({', '.join('?' for _ in values)})" if values else " AND 0"
        args += values
    return sql, args


def _raw(by: str, lo: float, hi: float, keys: list[list[str]]) -> tuple[str, list[Any]]:
    extra, args = _in(_FILTER_OF.get(by, "user"), keys)
    sql = (
        f"SELECT {GROUPS[by]} AS key, {_SUMS} FROM attempts "
        f"WHERE end_time >= ? AND end_time < ?{extra} GROUP BY 1"
    )
    return _named(sql), [lo, hi, *args]


def _rolled(
    by: str, period: str, lo: float, hi: float, keys: list[list[str]]
) -> tuple[str, list[Any]]:
    label = {
        "day": "date(start, 'unixepoch')",
        "month": "strftime('%Y-%m', start, 'unixepoch')",
    }.get(by, "key")
    extra, args = _in("key", keys)
    sql = _ROLLED.format(label=label) + extra + " GROUP BY 1"
    return _named(sql), [period, _DIM_OF[by], lo, hi, *args]


def _named(sql: str) -> str:
    """Name a source's columns as the final query reads them."""
    return (
        f"SELECT * FROM (SELECT NULL AS key, NULL AS a, NULL AS d, NULL AS e, NULL AS c, "
        f"NULL AS u, NULL AS ws, NULL AS wn, NULL AS wm, NULL AS ms, NULL AS mn "
        f"WHERE 0 UNION ALL {sql})"
    )


def _floor(t: float, step: float) -> float:
    return (t // step) * step


def _ceil(t: float, step: float) -> float:
    return -((-t) // step) * step


def _month_floor(t: float) -> float:
    g = time.gmtime(t)
    return float(calendar.timegm((g.tm_year, g.tm_mon, 1, 0, 0, 0)))


def _month_ceil(t: float) -> float:
    start = _month_floor(t)
    if start == t:
        return t
    g = time.gmtime(t)
    year, month = (g.tm_year + 1, 1) if g.tm_mon == 12 else (g.tm_year, g.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def owners(conn: sqlite3.Connection) -> list[str]:
    """Every user with a record (kept in its own small table as records are added: the
    visibility of a user or group admin is computed from it)."""
    return [r[0] for r in conn.execute("SELECT user FROM owners")]


def attempts_of(conn: sqlite3.Connection, job_id: str) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,))
    return [_record(row) for row in rows]
