"""The aiohttp application: route table, JSON errors, request ids and the auth slot.

Every error leaves as `{"error": {"code", "message"}}` with a 4xx status (5xx only for real
server faults, logged with the request id). The `authenticate` middleware is the one place
that turns a request into an `Identity` (a verified JWT, see xce.auth) and checks the
route's permission; `public` routes need no token, `authenticated` ones any valid token.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from typing import Any

from aiohttp import web

from xce.api.audit import audited, recorded
from xce.api.guard_middleware import guard
from xce.api.http import (
    AUTH,
    HA,
    IDENTITY,
    REQUEST_ID,
    ROUTE,
    Identity,
    bearer_token,
    json_response,
    route_of,
)
from xce.api.identities import IDENTITIES, IdentityMemo
from xce.api.metrics import observe
from xce.api.mtls import require_client_cert
from xce.api.peer import PEERS, PeerIdentities, peer_credentials
from xce.api.routes import Route, all_routes
from xce.api.transfers import TRANSFERS, TransferGate, defer_continue
from xce.auth.runtime import AuthRuntime
from xce.config.settings import Config
from xce.core.errors import Forbidden, InvalidRequest, NotPrimary, Unauthorized, XceError
from xce.core.rbac import allows
from xce.telemetry import logs

log = logging.getLogger("xce.api")


def _error(status: int, code: str, message: str, request_id: str) -> web.Response:
    resp = json_response({"error": {"code": code, "message": message}}, status=status)
    resp.headers["X-Request-Id"] = request_id
    return resp


_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def _answer_error(request: web.Request, exc: Exception, request_id: str) -> web.Response:
    """The JSON answer for an exception a handler raised (the `front` middleware's
    mapping); re-raises what must pass through (a redirect: an HTTPException below 400)."""
    if isinstance(exc, XceError):
        resp = _error(exc.http_status, exc.code, exc.message, request_id)
        resp.headers.update(exc.http_headers)  # Retry-After of a 503 busy, ...
        if isinstance(exc, NotPrimary):  # refused before any change: safe to send elsewhere
            resp.headers["X-XCE-Not-Primary"] = "1"
        return resp
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        message = exc.text or exc.reason
        if exc.status == 404:
            message = f"no route for {request.method} {request.path}"
        elif exc.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        elif exc.status == 413:
            message = "the request body is larger than the limit"
        code = _HTTP_CODES.get(exc.status, "http_error")
        resp = _error(exc.status, code, message or exc.reason, request_id)
        if "Allow" in exc.headers:  # RFC 9110: a 405 names the methods that are allowed
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError, ValueError)):
        return _error(400, "invalid_request", str(exc), request_id)
    if isinstance(exc, ConnectionResetError):
        # The client went, or the guard closed a body that stalled (body_timeout_s): the
        # client's doing, not a fault here, so one line, not a traceback. Nobody reads the
        # answer; it is for the latency histogram.
        log.warning(
            "request %s %s ended: the connection closed before its body arrived whole "
            "(client gone or stalled past [guard] body_timeout_s; request id %s)",
            request.method,
            request.path,
            request_id,
        )
        return _error(400, "connection_lost", "the connection closed mid-body", request_id)
    log.exception("request %s %s failed (request id %s)", request.method, request.path, request_id)
    return _error(500, "internal", f"internal error (request id {request_id})", request_id)


def _request_id(request: web.Request) -> str:
    # A label for logs, not a secret: the Mersenne Twister, not a getrandom(2) call per request.
    request_id = request.headers.get("X-Request-Id", "")[:64] or f"{random.getrandbits(64):016x}"
    request[REQUEST_ID] = request_id
    logs.REQUEST_ID.set(request_id)
    return request_id


def _not_primary(request: web.Request, node: Any) -> web.Response | None:
    """Epochs on every request, and no API on a controller that is not primary.

    A client sends the highest epoch it has seen (`X-XCE-Epoch`); a primary that meets a
    newer one checks with the other candidates and steps down if one confirms it. A node
    that is not primary answers 503 to every route but the public ones and the vote
    (`Route.any_role`): a primary whose probe saw its switchover target's own vote steps
    down before the target's request arrives, and its API, still listening while it
    shuts down, must answer that request.
    """
    claimed = request.headers.get("X-XCE-Epoch", "")
    if claimed.isdigit():
        node.claimed_epoch(int(claimed))
    if node.role == "primary":
        return None
    route = route_of(request)
    if route is not None and (route.permission == "public" or route.any_role):
        return None
    response = _error(
        503,
        "not_primary",
        f"this controller is a {node.role}, not the primary",
        request.get(REQUEST_ID, ""),
    )
    response.headers["X-XCE-Not-Primary"] = "1"
    return response


@web.middleware
async def front(request: web.Request, handler: Any) -> web.StreamResponse:
    """The outer layers in one frame, in their order from the outside in: the latency
    histogram (`metrics.observe`, by route template; it sees every final status), high
    availability (epochs, 503 off the primary, role and epoch on answers), then request
    ids and JSON errors. One middleware instead of three: each aiohttp
    middleware is a coroutine frame and a handler partial on every request."""
    started = time.perf_counter()
    status = 500
    try:
        node = request.app.get(HA)
        refusal = _not_primary(request, node) if node is not None else None
        if refusal is not None:
            response: web.StreamResponse = refusal
        else:
            request_id = _request_id(request)
            try:
                response = await handler(request)
            except Exception as exc:
                response = _answer_error(request, exc, request_id)
            else:
                response.headers["X-Request-Id"] = request_id
        if node is not None and not response.prepared:
            response.headers["X-XCE-Role"] = node.role
            response.headers["X-XCE-Epoch"] = str(node.epochs.epoch)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        observe(request, status, started)


def _identity(request: web.Request, route: Route) -> Identity:
    """Verify the bearer JWT, build the `Identity` and check the route's permission."""
    runtime: AuthRuntime = request.app[AUTH]
    token = bearer_token(request.headers.get("Authorization", ""))
    if token:
        who = request.app[IDENTITIES].identity(runtime, token)  # verified on every request
    elif (creds := peer_credentials(request)) is not None:  # the local socket: the kernel's word
        who = request.app[PEERS].identity(runtime, creds)
    else:
        raise Unauthorized("this request needs a bearer token (run xce login or set XCE_TOKEN)")
    request[IDENTITY] = who  # set before the check: the audit trail names refused callers
    if route.permission != "authenticated" and not allows(who.permissions, route.permission):
        raise Forbidden(
            f"{who.user} (role {who.role}) may not use {route.permission} ({route.summary})"
        )
    host = request.match_info.get("host")
    if who.host is not None and host is not None and host != who.host:
        raise Forbidden(f"this worker token is bound to host {who.host}, not {host}")
    return who


def _worker_contact(request: web.Request, who: Identity) -> None:
    """A worker's authenticated request is contact with a worker for the primary's write
    lease (xce/ha/lease.py). Counted before the handler runs, so that a worker's
    registration can itself renew the lease that lets it be written."""
    node = request.app.get(HA)
    if (
        node is not None
        and node.lease is not None
        and "worker" in who.roles
        and request.path.startswith("/api/v1/workers/")
    ):
        node.lease.worker_contact()


def _declared_query(request: web.Request, route: Route) -> None:
    """Refuse query parameters the route does not declare: `?stat=RUN` is a typo that would
    otherwise list every job. The route table is the one list of what each route takes."""
    if request.query_string and request.query:  # the string first: parsing costs ~1 us
        unknown = sorted(set(request.query) - {p.name for p in route.query})
        if unknown:
            known = ", ".join(p.name for p in route.query) or "none"
            raise InvalidRequest(
                f"unknown query parameter {unknown[0]!r} for {route.method} "
                f"{route.path} (it takes: {known})"
            )


async def _admitted(request: web.Request, route: Route, handler: Any) -> web.StreamResponse:
    """`_admit`, then the handler: what the audit trail runs and records for audited routes."""
    _admit(request, route)
    return await handler(request)


def _admit(request: web.Request, route: Route) -> None:
    """Authentication and the route's permission (`_identity`; public routes run as
    "anonymous"), a worker's contact for the write lease, then the declared query."""
    if route.permission == "public":
        request[IDENTITY] = who = Identity("anonymous")
    else:
        who = _identity(request, route)
    _worker_contact(request, who)
    _declared_query(request, route)


@web.middleware
async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    """The inner layers in one frame, in their order from the outside in: the worker routes'
    client certificate (xce/api/mtls.py), the audit trail of admin and control routes
    (xce/api/audit.py, which records refused attempts too, so it wraps the rest), then
    `_admit`. Checks and a conditional wrapper instead of a middleware each: an aiohttp
    middleware is a coroutine frame and a handler partial on every request."""
    require_client_cert(request)
    route = route_of(request)
    if route is None:  # no route: the handler raises aiohttp's 404/405
        request[IDENTITY] = Identity("anonymous")
        return await handler(request)
    if audited(route):
        return await recorded(
            request, route, functools.partial(_admitted, route=route, handler=handler)
        )
    _admit(request, route)
    return await handler(request)


def build_app(config: Config) -> web.Application:
    """The application: middlewares, body limit and the route table. Its components (service,
    gateway, auth, history, ...) are set under their `AppKey`s by the controller's
    composition (xce/server/compose.py), the one place that builds and connects them."""
    app = web.Application(
        middlewares=[
            front,
            guard,
            authenticate,
        ],
        client_max_size=config.controller.max_body_kb * 1024,
    )
    table: dict[str, Route] = {}
    for i, route in enumerate(all_routes()):
        name = f"r{i}_{route.handler.__name__}"
        # A file body (raw_body) is asked for with `100 Continue` only after its checks.
        expect = defer_continue if route.raw_body else None
        app.router.add_route(
            route.method, route.path, route.handler, name=name, expect_handler=expect
        )
        table[name] = route
    app[ROUTE] = table
    settings = config.controller
    app[TRANSFERS] = TransferGate(settings.max_concurrent_transfers, settings.transfer_wait_s)
    app[IDENTITIES] = IdentityMemo()
    app[PEERS] = PeerIdentities()
    return app
