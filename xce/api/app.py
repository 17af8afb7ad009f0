"""The aiohttp application: route table, JSON errors, request ids and the auth slot.

Every error leaves as `{"error": {"code", "message"}}` with a 4xx status (5xx only for real
server faults, logged with the request id). The `authenticate` middleware is the one place
that turns a request into an `Identity`; the RBAC issue replaces its token check.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from typing import Any

from aiohttp import web

from xce.api.guard_middleware import guard
from xce.api.http import (
    CONFIG,
    GATEWAY,
    IDENTITY,
    REQUEST_ID,
    SERVICE,
    SETTINGS,
    Identity,
    json_response,
)
from xce.api.mtls import worker_client_cert
from xce.api.routes import Route, all_routes
from xce.config import Config
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core.errors import Forbidden, Unauthorized, XceError

log = logging.getLogger("xce.api")
ROUTE = web.AppKey("routes", dict)

# Which static-token roles may use which permission classes (the RBAC issue replaces this).
ROLE_PERMISSIONS = {
    "admin": {"*"},
    "user": {"job:submit", "job:view", "job:control", "queue:view", "host:view",
             "cluster:view"},
    "worker": {"worker", "cluster:view"},
}


def _error(status: int, code: str, message: str, request_id: str) -> web.Response:
    resp = json_response({"error": {"code": code, "message": message}}, status=status)
    resp.headers["X-Request-Id"] = request_id
    return resp


_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
               415: "unsupported_media_type"}


@web.middleware
async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
    request_id = request.headers.get("X-Request-Id", "")[:64] or secrets.token_hex(8)
    request[REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except XceError as exc:
        return _error(exc.http_status, exc.code, exc.message, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text or exc.reason
        if exc.status == 404:
            message = f"no route for {request.method} {request.path}"
        elif exc.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        elif exc.status == 413:
            message = "the request body is larger than the limit"
        code = _HTTP_CODES.get(exc.status, "http_error")
        return _error(exc.status, code, message or exc.reason, request_id)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        return _error(400, "invalid_request", str(exc), request_id)
    except Exception:
        log.exception("request %s %s failed (request id %s)", request.method, request.path,
                      request_id)
        return _error(500, "internal", f"internal error (request id {request_id})", request_id)
    response.headers["X-Request-Id"] = request_id
    return response


def _route_of(request: web.Request) -> Route | None:
    info = request.match_info.route
    return request.app[ROUTE].get(getattr(info, "name", None) or "")


@web.middleware
async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    route = _route_of(request)
    if route is None or route.permission == "public":
        request[IDENTITY] = Identity("anonymous", "public")
        return await handler(request)
    tokens = request.app[SETTINGS].tokens  # type: ignore[attr-defined]
    if not tokens:
        # No tokens configured: a local development controller; everyone is an admin.
        request[IDENTITY] = Identity(request.headers.get("X-XCE-User", "admin"), "admin")
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("this request needs a bearer token (run xce login or set XCE_TOKEN)")
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    entry = next((t for t in tokens if hmac.compare_digest(t.sha256, digest)), None)
    if entry is None:
        raise Unauthorized("the bearer token is not valid")
    allowed = ROLE_PERMISSIONS.get(entry.role, set())
    if "*" not in allowed and route.permission not in allowed:
        raise Forbidden(f"role {entry.role} may not use {route.permission} ({route.summary})")
    request[IDENTITY] = Identity(entry.name, entry.role)
    return await handler(request)


def build_app(
    service: ControllerService, gateway: WorkerGateway, config: Config
) -> web.Application:
    settings = config.controller
    app = web.Application(
        middlewares=[errors, guard, worker_client_cert, authenticate],
        client_max_size=settings.max_body_kb * 1024,
    )
    app[SERVICE] = service
    app[GATEWAY] = gateway
    app[SETTINGS] = settings
    app[CONFIG] = config
    table: dict[str, Route] = {}
    for i, route in enumerate(all_routes()):
        name = f"r{i}_{route.handler.__name__}"
        app.router.add_route(route.method, route.path, route.handler, name=name)
        table[name] = route
    app[ROUTE] = table
    return app
