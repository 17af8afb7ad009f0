"""`GET /api/v1/events`: the live change stream as Server-Sent Events.

Each message names one changed object and carries its current view, the same JSON the list
endpoints return:

    id: 3f9a1c2e-42            <- <stream>-<seq>; send it back as Last-Event-ID (or ?since=)
    event: job                 <- job | array | host | queue | reservation | hello | resync
    data: {...job view...}

The first message is `hello` with `{"stream", "seq", "resumed"}`: `resumed` false means the
client must re-fetch its listings (first connection, another controller, or history too
short). `resync` mid-stream means this reader fell behind and its queue was dropped: re-fetch,
then carry on reading. A comment line every `keepalive` seconds keeps proxies and idle
detection honest. Jobs the caller may not view are never sent (the same rule as the job
listing, xce/api/access.py), nor reservations they are not in (xce/api/reservations.py).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from xce.api.access import visible_owners
from xce.api.http import BUS, GATEWAY, SERVICE, identity, query_int
from xce.api.routes import Param, Route
from xce.api.views import host_view, job_view, pending_rest_view, queue_view
from xce.controller.bus import Change
from xce.controller.service import ControllerService
from xce.core.rbac import allows


def _view(request: web.Request, change: Change) -> dict[str, Any]:
    service: ControllerService = request.app[SERVICE]
    state = service.state
    if change.kind == "job":
        job = state.jobs.get(change.key)
        if job is None:
            return {"id": change.key, "removed": True}
        return job_view(job, service.reasons, service.clock())
    if change.kind == "array":
        array = state.arrays.get(int(change.key))
        pending = pending_rest_view(array, service.reasons) if array and array.pending else None
        return {"array_id": change.key, "pending": pending, "removed": array is None}
    if change.kind == "host":
        host = state.hosts.get(change.key)
        if host is None:
            return {"name": change.key, "removed": True}
        gateway = request.app[GATEWAY]
        return host_view(
            host,
            state,
            gateway.load.get(change.key),
            gateway.liveness(change.key),
            gateway.containment.get(change.key),
            gateway.releases.get(change.key),
        )
    if change.kind == "queue":
        queue = state.queues.get(change.key)
        return queue_view(queue, state) if queue else {"name": change.key, "removed": True}
    if change.kind == "reservation":
        from xce.api.reservations import scope_of

        found = state.reservations.get(change.key)
        scope = scope_of(request)  # one the caller may not see (any longer) is gone for them
        return (
            scope.view(found, service.clock())
            if found and scope.may_see(found)
            else {"name": change.key, "removed": True}
        )
    return {"reason": change.key}


def _message(event_id: str, kind: str, data: dict[str, Any]) -> bytes:
    body = json.dumps(data, default=str, separators=(",", ":"))
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n".encode()


async def events(request: web.Request) -> web.StreamResponse:
    who = identity(request)
    owner_ok = visible_owners(request)  # the same rule as GET /api/v1/jobs
    shows = {
        "host": allows(who.permissions, "host:view"),
        "queue": allows(who.permissions, "queue:view"),
        "reservation": allows(who.permissions, "host:view"),
    }

    from xce.api.reservations import scope_of

    reservations = scope_of(request)
    state = request.app[SERVICE].state

    def visible(change: Change) -> bool:
        if change.kind == "reservation" and shows["reservation"]:
            # As the listing: only those the caller is in (a removal names only the name).
            found = state.reservations.get(change.key)
            return found is None or reservations.may_see(found)
        if change.kind in shows:
            return shows[change.kind]
        return change.user is None or owner_ok is None or owner_ok(change.user)

    keepalive = query_int(request, "keepalive", 15, 1, 300)
    last_id = request.headers.get("Last-Event-ID") or request.query.get("since")
    bus = request.app[BUS]
    sub, resumed = bus.subscribe(last_id, visible)
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        hello = {"stream": bus.stream, "seq": bus.seq, "resumed": resumed}
        await response.write(_message(bus.event_id(bus.seq), "hello", hello))
        while True:
            batch = await sub.get_batch(keepalive)
            if not batch:
                await response.write(b": keepalive\n\n")
                continue
            # Views are current state: send each key once, at its latest sequence number.
            latest: dict[tuple[str, str], Change] = {}
            for change in batch:
                if change.kind == "resync":
                    latest.clear()
                latest.pop((change.kind, change.key), None)
                latest[(change.kind, change.key)] = change
            chunks = [
                _message(bus.event_id(c.seq), c.kind, _view(request, c)) for c in latest.values()
            ]
            await response.write(b"".join(chunks))
    finally:
        sub.close()


ROUTES = [
    Route(
        "GET",
        "/api/v1/events",
        events,
        "Live stream (Server-Sent Events) of job, array, host and queue changes",
        "job:view",
        "events",
        query=(
            Param("since", "resume after this event id (or send Last-Event-ID)"),
            Param(
                "keepalive",
                "seconds between keepalive comments (default 15)",
                {"type": "integer", "minimum": 1, "maximum": 300},
            ),
        ),
        text_response="text/event-stream",
    ),
]
