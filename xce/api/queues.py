"""Queue routes: list, show, create, modify, delete, open/close, activate/deactivate."""

from __future__ import annotations

from aiohttp import web

from xce.api import schemas
from xce.api.http import SERVICE, json_response, read_json
from xce.api.routes import Route
from xce.api.views import queue_view
from xce.controller.service import ControllerService
from xce.core.model import HostFailurePolicy, QueueRecord


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
    body = await read_json(request, schemas.QUEUE_CREATE)
    queue = QueueRecord(
        name=body["name"],
        priority=body.get("priority", 0),
        open=body.get("open", True),
        active=body.get("active", True),
        hosts=tuple(body.get("hosts", [])),
        description=body.get("description", ""),
        on_host_failure=HostFailurePolicy(body.get("on_host_failure", "requeue")),
        plugins=tuple(body.get("plugins", [])),
        max_running=body.get("max_running"),
        max_running_per_user=body.get("max_running_per_user"),
        shares=tuple(sorted((k, str(v)) for k, v in body.get("shares", {}).items())),
        **_limits(body),
    )
    service = _service(request)
    created = await service.create_queue(queue)
    return json_response(queue_view(created, service.state), status=201)


_LIMITS = (
    "default_walltime_s",
    "max_walltime_s",
    "default_memory_mb",
    "max_memory_mb",
    "max_slots",
)


def _limits(body: dict) -> dict:
    out = {key: body[key] for key in _LIMITS if key in body}
    if "users" in body:
        out["users"] = tuple(body["users"])
    if "preempt" in body:
        out["preempt"] = tuple(body["preempt"])
    for key in ("preempt_mode", "preempt_min_run_s"):
        if key in body:
            out[key] = body[key]
    return out


async def modify(request: web.Request) -> web.Response:
    body = await read_json(request, schemas.QUEUE_MODIFY)
    changes: dict[str, object] = _limits(body)
    for key in ("priority", "description", "max_running", "max_running_per_user"):
        if key in body:
            changes[key] = body[key]
    if "hosts" in body:
        changes["hosts"] = tuple(body["hosts"])
    if "plugins" in body:
        changes["plugins"] = tuple(body["plugins"])
    if "on_host_failure" in body:
        changes["on_host_failure"] = HostFailurePolicy(body["on_host_failure"])
    if "shares" in body:
        changes["shares"] = tuple(sorted((k, str(v)) for k, v in body["shares"].items()))
    service = _service(request)
    queue = await service.modify_queue(request.match_info["name"], changes)
    return json_response(queue_view(queue, service.state))


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await _service(request).delete_queue(name)
    return json_response({"deleted": name})


def _action(action: str):
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
        body=schemas.QUEUE_CREATE,
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
        body=schemas.QUEUE_MODIFY,
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
