"""Host routes: list, show, open, close, drain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from xce.api.http import GATEWAY, SERVICE, json_response, read_body
from xce.api.routes import Route
from xce.api.views import host_view
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.protocol.admin import Reason


def _view(request: web.Request, name: str) -> dict:
    service: ControllerService = request.app[SERVICE]
    gateway: WorkerGateway = request.app[GATEWAY]
    return host_view(
        service.state.host(name),
        service.state,
        gateway.load.get(name),
        gateway.liveness(name),
        gateway.containment.get(name),
        gateway.releases.get(name),
    )


async def list_(request: web.Request) -> web.Response:
    service: ControllerService = request.app[SERVICE]
    return json_response({"hosts": [_view(request, n) for n in sorted(service.state.hosts)]})


async def show(request: web.Request) -> web.Response:
    return json_response(_view(request, request.match_info["name"]))


def _action(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        service: ControllerService = request.app[SERVICE]
        reason = ""
        if request.can_read_body:
            reason = (await read_body(request, Reason)).reason
        name = request.match_info["name"]
        await service.host_action(name, action, reason)
        return json_response(_view(request, name))

    handler.__name__ = f"host_{action}"
    return handler


_SUMMARIES = {
    "open": "Open a host: it takes new jobs again",
    "close": "Close a host: no new jobs, running jobs continue (LSF hclose)",
    "drain": "Drain a host: no new jobs; it shows drained once its jobs finish",
}
ROUTES = [
    Route("GET", "/api/v1/hosts", list_, "List hosts with status and load", "host:view", "hosts"),
    Route("GET", "/api/v1/hosts/{name}", show, "Show one host", "host:view", "hosts"),
    *[
        Route(
            "POST",
            f"/api/v1/hosts/{{name}}/{action}",
            _action(action),
            summary,
            "host:admin",
            "hosts",
            body=Reason,
        )
        for action, summary in _SUMMARIES.items()
    ],
]
