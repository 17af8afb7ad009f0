"""Which class of route a request hits, from the route table's permission.

The guard (allow-lists) and the mutual-TLS check treat admin routes (`*:admin`) and worker
routes (`worker`) apart from the rest; this is the one place that decides which is which, so
a new route is classified by the permission it already has to declare.
"""

from __future__ import annotations

from functools import cache

from aiohttp import web

from xce.api.routes import all_routes

ADMIN, WORKER, DEFAULT = "admin", "worker", "default"


def class_of_permission(permission: str) -> str:
    if permission.endswith(":admin"):
        return ADMIN
    if permission == "worker":
        return WORKER
    return DEFAULT


@cache
def _table() -> dict[tuple[str, object], str]:
    return {(r.method, r.handler): class_of_permission(r.permission) for r in all_routes()}


def route_class(request: web.Request) -> str:
    """`admin`, `worker` or `default` (also for unknown paths, which then 404)."""
    route = request.match_info.route
    return _table().get((route.method, route.handler), DEFAULT)
