"""Advance reservation routes: list and show (`host:view`: users), create and delete
(`host:admin`: admins and operators), like `brs` / `brsvadd` / `brsvdel`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from xce.api.http import SERVICE, identity, json_response, read_json
from xce.api.routes import Route
from xce.api.schemas import NAME
from xce.controller.reservations import add_reservation, delete_reservation
from xce.controller.service import ControllerService
from xce.core.errors import InvalidRequest, NotFound
from xce.core.model import ReservationRecord
from xce.core.reservations import FLAGS

TIME = {"type": "number", "minimum": 0, "maximum": 2**40}
USER = {"type": "string", "pattern": r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"}
RESERVATION_CREATE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "hosts", "start"],
    "properties": {
        "name": NAME,
        "hosts": {"type": "array", "minItems": 1, "maxItems": 100000, "items": NAME},
        "start": TIME,  # epoch seconds
        "end": TIME,  # epoch seconds; or duration_s
        "duration_s": {"type": "integer", "minimum": 1, "maximum": 10 * 365 * 86400},
        "slots": {"type": "integer", "minimum": 0, "maximum": 100000},
        "users": {"type": "array", "maxItems": 10000, "items": USER},
        "maintenance": {"type": "boolean"},
        "flags": {
            "type": "array",
            "maxItems": 8,
            "uniqueItems": True,
            "items": {"type": "string", "enum": list(FLAGS)},
        },
        "description": {"type": "string", "maxLength": 1024},
    },
}


def reservation_view(r: ReservationRecord, now: float) -> dict[str, Any]:
    return {
        "name": r.name,
        "hosts": list(r.hosts),
        "start": r.start,
        "end": r.end,
        "slots": r.slots or None,
        "users": list(r.users),
        "maintenance": r.maintenance,
        "flags": list(r.flags),
        "description": r.description,
        "created_by": r.created_by,
        "created_at": r.created_at,
        "state": r.state_at(now),
    }


def _service(request: web.Request) -> ControllerService:
    return request.app[SERVICE]


async def list_(request: web.Request) -> web.Response:
    service = _service(request)
    now = service.clock()
    found = sorted(service.state.reservations.values(), key=lambda r: (r.start, r.name))
    return json_response({"reservations": [reservation_view(r, now) for r in found]})


async def show(request: web.Request) -> web.Response:
    service = _service(request)
    name = request.match_info["name"]
    r = service.state.reservations.get(name)
    if r is None:
        raise NotFound(f"reservation {name!r} does not exist")
    return json_response(reservation_view(r, service.clock()))


async def create(request: web.Request) -> web.Response:
    body = await read_json(request, RESERVATION_CREATE)
    if ("end" in body) == ("duration_s" in body):
        raise InvalidRequest("give exactly one of end and duration_s")
    start = float(body["start"])
    end = float(body["end"]) if "end" in body else start + body["duration_s"]
    service = _service(request)
    record = ReservationRecord(
        name=body["name"],
        hosts=tuple(body["hosts"]),
        start=start,
        end=end,
        slots=body.get("slots", 0),
        users=tuple(body.get("users", [])),
        maintenance=body.get("maintenance", False),
        flags=tuple(body.get("flags", [])),
        description=body.get("description", ""),
        created_by=identity(request).user,
        created_at=service.clock(),
    )
    made = await add_reservation(service, record)
    return json_response(reservation_view(made, service.clock()), status=201)


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await delete_reservation(_service(request), name)
    return json_response({"deleted": name})


ROUTES = [
    Route(
        "GET",
        "/api/v1/reservations",
        list_,
        "List advance reservations",
        "host:view",
        "reservations",
    ),
    Route(
        "POST",
        "/api/v1/reservations",
        create,
        "Reserve hosts (or slots on them) for a time window, for users or maintenance",
        "host:admin",
        "reservations",
        body=RESERVATION_CREATE,
        ok_status=201,
    ),
    Route(
        "GET",
        "/api/v1/reservations/{name}",
        show,
        "Show one advance reservation",
        "host:view",
        "reservations",
    ),
    Route(
        "DELETE",
        "/api/v1/reservations/{name}",
        delete,
        "Delete an advance reservation (jobs that target it stay pending)",
        "host:admin",
        "reservations",
    ),
]
