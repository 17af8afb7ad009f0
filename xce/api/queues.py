"""Queue routes: list, show, create, modify, delete, open/close, activate/deactivate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from aiohttp import web

from xce.api.http import SERVICE, json_response, read_body
from xce.api.routes import Route
from xce.api.views import queue_view
from xce.controller.service import ControllerService
from xce.core.model import QueueRecord
from xce.protocol.admin import QueueCreate, QueueModify, queue_fields
from xce.protocol.bodies import AT_LEAST_ONE, given


def _service(request: web.Request) -> ControllerService:
    return request.app[SERVICE]


async def list_(request: web.Request) -> web.Response:
    state = _service(request).state
    queues = sorted(state.queues.values(), key=lambda q: (-q.priority, q.name))
    return json_response({"queues": [queue_view(q, state) for q in queues]})


async def show(request: web.Request) -> web.Response:
    state = _service(request).state
    return json_response(queue_view(state.queue(request.match_info["name"]), state))


async def create(request: web.Request) -> web.Response:
    body = await read_body(request, QueueCreate)
    queue = QueueRecord(**queue_fields(given(body)))
    service = _service(request)
    created = await service.create_queue(queue)
    return json_response(queue_view(created, service.state), status=201)


async def modify(request: web.Request) -> web.Response:
    changes = queue_fields(given(await read_body(request, QueueModify)))
    service = _service(request)
    queue = await service.modify_queue(request.match_info["name"], changes)
    return json_response(queue_view(queue, service.state))


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await _service(request).delete_queue(name)
    return json_response({"deleted": name})


def _action(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        service = _service(request)
        queue = await service.queue_action(request.match_info["name"], action)
        return json_response(queue_view(queue, service.state))

    handler.__name__ = f"queue_{action}"
    return handler


_SUMMARIES = {
    "open": "Open a queue: it accepts submissions",
    "close": "Close a queue: it refuses new submissions",
    "activate": "Activate a queue: its jobs are dispatched",
    "deactivate": "Deactivate a queue: its jobs stay pending",
}
ROUTES = [
    Route("GET", "/api/v1/queues", list_, "List queues with job counts", "queue:view", "queues"),
    Route(
        "POST",
        "/api/v1/queues",
        create,
        "Create a queue",
        "queue:admin",
        "queues",
        body=QueueCreate,
        ok_status=201,
    ),
    Route("GET", "/api/v1/queues/{name}", show, "Show one queue", "queue:view", "queues"),
    Route(
        "PATCH",
        "/api/v1/queues/{name}",
        modify,
        "Change a queue's settings (its jobs keep theirs)",
        "queue:admin",
        "queues",
        body=Annotated[QueueModify, AT_LEAST_ONE],
    ),
    Route(
        "DELETE",
        "/api/v1/queues/{name}",
        delete,
        "Delete a queue no pending, running or suspended job is in",
        "queue:admin",
        "queues",
    ),
    *[
        Route(
            "POST",
            f"/api/v1/queues/{{name}}/{action}",
            _action(action),
            summary,
            "queue:admin",
            "queues",
        )
        for action, summary in _SUMMARIES.items()
    ],
]
