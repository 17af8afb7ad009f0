"""Advance reservation routes: list and show (`host:view`: users), create and delete
(`host:admin`: admins and operators), like `brs` / `brsvadd` / `brsvdel`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from xce.api.http import SERVICE, identity, json_response, read_body
from xce.api.routes import Route
from xce.controller.reservations import add_reservation, delete_reservation
from xce.controller.service import ControllerService
from xce.core.errors import InvalidRequest, NotFound
from xce.core.model import ReservationRecord
from xce.protocol.admin import ReservationCreate


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
    body = await read_body(request, ReservationCreate)
    if (body.end is None) == (body.duration_s is None):
        raise InvalidRequest("give exactly one of end and duration_s")
    start = body.start
    end = body.end if body.end is not None else start + (body.duration_s or 0)
    service = _service(request)
    record = ReservationRecord(
        name=body.name,
        hosts=body.hosts,
        start=start,
        end=end,
        slots=body.slots,
        users=body.users,
        maintenance=body.maintenance,
        flags=body.flags,
        description=body.description,
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
        body=ReservationCreate,
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
