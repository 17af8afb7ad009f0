"""The route table: every endpoint once, with its permission, schema and summary.

The aiohttp router and the OpenAPI document are both built from `ROUTES`, and a test walks
the router to check that they agree, so no endpoint is undocumented or unguarded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Param:
    name: str
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    permission: str  # an xce.core.rbac permission, "public" or "authenticated" (any token)
    tag: str
    body: Any = None  # the body's msgspec Struct (xce.protocol.bodies), or a JSON Schema dict
    raw_body: bool = False
    query: tuple[Param, ...] = ()
    ok_status: int = 200
    # the documented answer: a msgspec Struct (xce/protocol/schemas.py) or a JSON Schema dict
    response: Any = field(default_factory=lambda: {"type": "object"})
    binary_response: bool = False
    text_response: str = ""  # a text media type (e.g. Prometheus' text format) instead of JSON
    # served whatever this controller's role (other routes answer 503 off the primary): a
    # vote is asked of standbys and of a primary stepping down alike (xce/ha/election.py)
    any_role: bool = False


def all_routes() -> list[Route]:
    from xce.api import (
        accounting,
        audit,
        auth,
        auth_code,
        cluster,
        file_usage,
        history,
        hosts,
        job_changes,
        jobs,
        join,
        metrics,
        queues,
        reservations,
        stream,
        users,
        workers,
    )

    return [
        *cluster.ROUTES,
        *history.ROUTES,
        *jobs.ROUTES,
        *queues.ROUTES,
        *hosts.ROUTES,
        *workers.ROUTES,
        *auth.ROUTES,
        *auth_code.ROUTES,
        *users.ROUTES,
        *audit.ROUTES,
        *metrics.ROUTES,
        *join.ROUTES,
        *stream.ROUTES,
        *accounting.ROUTES,
        *reservations.ROUTES,
        *job_changes.ROUTES,
        *file_usage.ROUTES,
    ]  # job modify, priority
