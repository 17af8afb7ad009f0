"""Audit trail of the API: the recording of admin and control actions (`recorded`, run by
the application's `authenticate` middleware), and the route that reads the log back.

Recorded here, for every route whose permission is `job:control`, `queue:admin`, `host:admin` or
`cluster:admin`, and for job submission (`job.submit`, the queue and, when it is not the caller,
the user the job runs as in its detail): who (the token's user), what (`job.kill`,
`queue.close`, `host.drain` ...), which object (`job:17`, `queue:normal`), the outcome (`ok`, or
`denied` / `failed` with the error message) and the caller's address — refused attempts
included. Logins, token and user admin actions are recorded by their own handlers (xce.api.auth,
xce.api.users) with more specific names.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from xce.api.http import AUTH, IDENTITY, json_response, query_int
from xce.api.routes import Param, Route
from xce.auth.audit import AuditLog, AuditQuery
from xce.core.errors import Forbidden, InvalidRequest, Unauthorized, XceError

AUDITED = ("job:control", "queue:admin", "host:admin", "cluster:admin")
SUBMIT = ("POST", "/api/v1/jobs")
# What a handler adds to its own record: the detail only it knows (a submission's queue),
# and the object when it knows it (the new job), which spares parsing its answer again.
AUDIT_DETAIL = web.RequestKey("audit_detail", str)
AUDIT_OBJECT = web.RequestKey("audit_object", str)


def _describe(route: Route, request: web.Request, body: Any) -> tuple[str, str]:
    """(action, object) of a request, e.g. ("job.kill", "job:17")."""
    if (route.method, route.path) == SUBMIT:
        job_id = body.get("job_id", "") if isinstance(body, dict) else ""
        return "job.submit", f"job:{job_id}"
    domain = route.permission.split(":")[0]
    last = route.path.rsplit("/", 1)[-1]
    verb = (
        last
        if not last.startswith("{") and last != f"{domain}s"
        else ("create" if route.method == "POST" else route.method.lower())
    )
    names = list(request.match_info.values())
    target = names[0] if names else (body.get("name", "") if isinstance(body, dict) else "")
    return f"{domain}.{verb}", f"{domain}:{target}"


def audited(route: Route) -> bool:
    """Whether the audit trail records requests to `route` (see the module docstring)."""
    return (route.permission in AUDITED and route.tag != "auth") or (
        route.method,
        route.path,
    ) == SUBMIT


async def recorded(request: web.Request, route: Route, handler: Any) -> web.StreamResponse:
    """Run `handler` (authentication included) and record its outcome, refusals too. Called
    by the application's `authenticate` middleware (xce/api/app.py) for `audited` routes
    only: the others skip this frame."""
    log: AuditLog = request.app[AUTH].audit
    try:
        response = await handler(request)
    except XceError as exc:
        who = request.get(IDENTITY)
        outcome = "denied" if isinstance(exc, (Forbidden, Unauthorized)) else "failed"
        action, obj = _describe(route, request, None)
        await log.record(
            who.user if who else "-", action, obj, outcome, exc.message, request.remote or ""
        )
        raise
    body = None
    given = request.get(AUDIT_OBJECT)
    if (
        given is None
        and isinstance(response, web.Response)
        and response.content_type == "application/json"
        and isinstance(response.body, bytes)
    ):
        body = json.loads(response.body)
    action, obj = _describe(route, request, body)
    obj = given or obj
    ok = response.status < 400
    await log.record(
        request[IDENTITY].user,
        action,
        obj,
        "ok" if ok else "failed",
        request.get(AUDIT_DETAIL, ""),
        request.remote or "",
        # an accepted job's record is as durable as the job (`AuditLog.relaxed_s`)
        durable=not (ok and action == "job.submit"),
    )
    return response


async def read(request: web.Request) -> web.Response:
    since = request.query.get("since")
    try:
        since_ts = float(since) if since else None
    except ValueError:
        raise InvalidRequest(f"query parameter since must be a number, got {since!r}") from None
    q = AuditQuery(
        user=request.query.get("user") or None,
        action=request.query.get("action") or None,
        object=request.query.get("object") or None,
        outcome=request.query.get("outcome") or None,
        since=since_ts,
        offset=query_int(request, "offset", 0, 0, 2**62),
        limit=query_int(request, "limit", 100, 1, 10000),
    )
    audit = request.app[AUTH].audit
    await audit.flush()  # relaxed records still waiting are read too
    rows, total = audit.query(q)
    return json_response({"records": rows, "total": total, "offset": q.offset, "limit": q.limit})


ROUTES = [
    Route(
        "GET",
        "/api/v1/audit",
        read,
        "Read the audit log (who did what to which object), oldest first, with filters",
        "cluster:admin",
        "audit",
        query=(
            Param("user", "only this user's actions"),
            Param("action", "an action or its prefix, e.g. job or job.kill"),
            Param("object", "one object, e.g. job:17 or queue:normal"),
            Param("outcome", "ok, denied or failed"),
            Param("since", "seconds since the epoch", {"type": "number"}),
            Param("offset", "records to skip", {"type": "integer", "minimum": 0}),
            Param(
                "limit", "records to return", {"type": "integer", "minimum": 1, "maximum": 10000}
            ),
        ),
    ),
]
