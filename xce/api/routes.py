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
    permission: str
    tag: str
    body: dict[str, Any] | None = None
    raw_body: bool = False
    query: tuple[Param, ...] = ()
    ok_status: int = 200
    response: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    binary_response: bool = False


def all_routes() -> list[Route]:
    from xce.api import cluster, hosts, jobs, queues, stream, workers

    return [*cluster.ROUTES, *jobs.ROUTES, *queues.ROUTES, *hosts.ROUTES, *workers.ROUTES,
            *stream.ROUTES]
