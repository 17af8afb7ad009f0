"""Accounting routes: finished attempts (sacct) and grouped sums (sreport, bacct -u).

The store is SQLite on the controller's disk (xce/accounting/store.py); every query runs in
a thread on its own read-only connection, never on the event loop. Visibility is the job
list's rule (`job:view` scopes): users see their own records, group admins their groups'
members', operators and admins everyone's.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from xce.accounting import store
from xce.api.access import visible_owners
from xce.api.http import AUTH, SERVICE, identity, json_response, query_int
from xce.api.routes import Param, Route
from xce.core import timespec
from xce.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.core.rbac import may_touch
from xce.core.state_base import parse_job_id


def parse_time(name: str, text: str, now: float) -> float:
    """A query bound by xce/core/timespec.py's rule for the API: wall-clock forms in UTC
    (a server has no user's time zone; `xce acct` sends its local times as epoch seconds),
    and ages (`30d`: that long before now), as a bound looking back takes."""
    return timespec.parse_time(text, now, local=False, past=True, what=f"query parameter {name}")


def _db(request: web.Request) -> Path:
    service = request.app[SERVICE]
    if service.accounting is None and not service.settings.accounting:
        raise Conflict("accounting is off on this controller ([controller] accounting)")
    return store.db_path(service.settings.state_dir)


def _filters(request: web.Request) -> tuple[dict[str, Any], str]:
    q = request.query
    now = time.time()
    out: dict[str, Any] = {}
    for param, key in (
        ("user", "user"),
        ("group", "grp"),
        ("queue", "queue"),
        ("host", "host"),
        ("name", "name"),
    ):
        if q.get(param):
            out[key] = [v.strip() for v in q[param].split(",") if v.strip()]
    if q.get("state"):
        states = [s.strip().upper() for s in q["state"].split(",") if s.strip()]
        bad = set(states) - {"DONE", "EXIT", "REQUEUED"}
        if bad:
            raise InvalidRequest(
                f"unknown accounting state {sorted(bad)[0]} (use DONE, EXIT or REQUEUED)"
            )
        out["state"] = states
    job = q.get("job", "").strip()
    if job:
        try:
            number, index = parse_job_id(job)
        except Exception:
            raise InvalidRequest(f"query parameter job: {job!r} is not a job id") from None
        if index is None:
            out["number"] = number
        else:
            out["job_id"] = job
    for param in ("since", "until"):
        if q.get(param):
            out[param] = parse_time(param, q[param], now)
    field = q.get("time", "end")
    if field not in ("end", "submit"):
        raise InvalidRequest(f"query parameter time must be end or submit, got {field!r}")
    return out, f"{field}_time"


async def _in_thread(request: web.Request, work: Any) -> Any:
    path = _db(request)
    if not path.exists():
        return None

    def run() -> Any:
        conn = store.connect(path, readonly=True)
        try:
            return work(conn)
        finally:
            conn.close()

    try:
        return await asyncio.get_running_loop().run_in_executor(None, run)
    except sqlite3.Error as exc:
        raise Conflict(f"the accounting store cannot be read: {exc}") from None


async def list_records(request: web.Request) -> web.Response:
    filters, field = _filters(request)
    limit = query_int(request, "limit", 1000, 1, 100_000)
    after = None
    if request.query.get("next"):
        try:
            after = store.parse_cursor(request.query["next"])
        except ValueError:
            raise InvalidRequest("query parameter next is not a cursor this API returned") from None
    visible = visible_owners(request)

    def work(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], str | None]:
        users = None if visible is None else [u for u in store.owners(conn) if visible(u)]
        return store.list_attempts(conn, filters, users, limit, after, field)

    found = await _in_thread(request, work)
    rows, cursor = found if found is not None else ([], None)
    return json_response({"jobs": rows, "next": cursor})


async def summary(request: web.Request) -> web.Response:
    by = request.query.get("by", "user")
    if by not in store.GROUPS:
        raise InvalidRequest(
            f"query parameter by must be one of {', '.join(store.GROUPS)}, got {by!r}"
        )
    filters, field = _filters(request)
    visible = visible_owners(request)

    def work(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        users = None if visible is None else [u for u in store.owners(conn) if visible(u)]
        return store.summary(conn, by, filters, users, field)

    rows = await _in_thread(request, work) or []
    return json_response(
        {"by": by, "since": filters.get("since"), "until": filters.get("until"), "rows": rows}
    )


async def archived_job(request: web.Request, job_id: str) -> web.Response:
    """`GET /api/v1/jobs/{id}` for a job retention removed: its accounting records."""
    try:
        number, index = parse_job_id(job_id)
    except Exception:
        raise NotFound(f"job {job_id} does not exist") from None

    def work(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        if index is None:
            rows = conn.execute(
                "SELECT job_id FROM attempts WHERE number = ? LIMIT 2", (number,)
            ).fetchall()
            if rows and rows[0][0] != job_id:
                return [{"array_tasks": True}]
        return store.attempts_of(conn, job_id)

    try:
        found = await _in_thread(request, work)
    except Conflict:
        found = None
    if not found:
        raise NotFound(
            f"job {job_id} does not exist (not in the cluster, and no accounting record of it)"
        )
    if found[0].get("array_tasks"):
        raise NotFound(
            f"job array {job_id} is archived: its tasks are in accounting (xce acct --job {job_id})"
        )
    who = identity(request)
    owner = found[-1]["user"]
    if not may_touch(
        who.user,
        who.groups,
        who.permissions,
        "job:view",
        owner,
        request.app[AUTH].directory.groups_of,
    ):
        raise Forbidden(f"{who.user} may not view job {job_id} (owned by {owner})")
    return json_response(archived_view(job_id, found))


def archived_view(job_id: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """A purged job as `job show` and the console's detail read it: the job view's fields
    from its last attempt, a history from every attempt, and the records themselves."""
    last = attempts[-1]
    history: list[dict[str, Any]] = [
        {
            "at": last["submit_time"],
            "event": "submitted",
            "detail": f"to queue {last['queue']} by {last['user']}",
        }
    ]
    for r in attempts:
        if r["start_time"] is not None:
            history.append(
                {
                    "at": r["start_time"],
                    "event": "started",
                    "detail": f"on {r['host']} (attempt {r['attempt']})",
                }
            )
        ended = (
            "requeued"
            if r["state"] == "REQUEUED"
            else ("finished" if r["start_time"] is not None else "killed")
        )
        detail = (
            r["state"]
            + (f", exit code {r['exit_code']}" if r["exit_code"] is not None else "")
            + (f" ({r['reason']})" if r["reason"] else "")
        )
        history.append({"at": r["end_time"], "event": ended, "detail": detail})
    return {
        "id": job_id,
        "archived": True,
        "note": "purged from the cluster's state by retention; from the accounting store",
        "state": last["state"],
        "user": last["user"],
        "group": last["grp"],
        "queue": last["queue"],
        "name": last["name"],
        "attempt": last["attempt"],
        "host": last["host"],
        "slots": last["req_slots"],
        "memory_mb": last["req_memory_mb"],
        "walltime_s": last["req_walltime_s"],
        "resources": last["resources"],
        "submit_time": last["submit_time"],
        "start_time": last["start_time"],
        "end_time": last["end_time"],
        "exit_code": last["exit_code"],
        "exit_signal": last["exit_signal"],
        "reason": last["reason"],
        "usage": {
            "cpu_user_s": last["cpu_user_s"],
            "cpu_system_s": last["cpu_system_s"],
            "cpu_time_s": last["cpu_user_s"] + last["cpu_system_s"],
            "max_rss_bytes": last["max_rss_bytes"],
            "wall_time_s": last["wall_s"],
        },
        "efficiency": {"cpu": last["cpu_eff"], "memory": last["mem_eff"]},
        "history": history,
        "attempts": attempts,
    }


_COMMON = (
    Param("user", "only these users (comma-separated)"),
    Param("group", "only these groups (fairshare groups; comma-separated)"),
    Param("queue", "only these queues (comma-separated)"),
    Param("state", "DONE, EXIT or REQUEUED (comma-separated)"),
    Param("host", "only attempts that ran on this host"),
    Param("job", "a job id, a task id (17[5]) or an array id (all its tasks)"),
    Param("name", "only jobs of this name"),
    Param("since", f"from this time on ({timespec.help_text(past=True)}; in UTC)"),
    Param("until", "before this time (same forms as since)"),
    Param(
        "time",
        "which time since/until bound: end (default) or submit",
        {"type": "string", "enum": ["end", "submit"]},
    ),
)

ROUTES = [
    Route(
        "GET",
        "/api/v1/accounting/jobs",
        list_records,
        "Finished attempts from the accounting store (sacct), oldest first, paged by `next`",
        "job:view",
        "accounting",
        query=(
            *_COMMON,
            Param(
                "limit",
                "rows to return (default 1000)",
                {"type": "integer", "minimum": 1, "maximum": 100000},
            ),
            Param("next", "the cursor a previous page returned"),
        ),
    ),
    Route(
        "GET",
        "/api/v1/accounting/summary",
        summary,
        "Core-hours, jobs, wait and efficiency grouped by user, group, queue, host, day or "
        "month (sreport, bacct -u)",
        "job:view",
        "accounting",
        query=(
            *_COMMON,
            Param(
                "by",
                "user (default), group, queue, host, day or month",
                {"type": "string", "enum": list(store.GROUPS)},
            ),
        ),
    ),
]
