"""Advance reservation routes: list and show (`host:view`: users), create and delete
(`host:admin`: admins and operators), like `brs` / `brsvadd` / `brsvdel`.

Who a reservation is for is other users' business: a caller without `host:admin` sees only
the reservations they are in (by name or one of their groups) and maintenance ones (which
name nobody), each with only their own entries of its user list; the rest read as if they
did not exist."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from xce.api.http import SERVICE, Identity, identity, json_response, read_body
from xce.api.routes import Route
from xce.controller.reservations import add_reservation, delete_reservation
from xce.controller.service import ControllerService
from xce.core.errors import InvalidRequest, NotFound
from xce.core.model import ReservationRecord
from xce.core.rbac import allows
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


class ReservationScope:
    """What one caller may see of reservations (see the module docstring): all of each
    with `host:admin`, those who make them; else their own entries of the ones they are in.
    Groups are the caller's and the fairshare groups that list them (as the submit checks
    a reservation's `@group` entries against)."""

    def __init__(self, who: Identity, fairshare_groups: tuple[tuple[str, tuple[str, ...]], ...]):
        self.everything = allows(who.permissions, "host:admin")
        groups = {*who.groups, *(g for g, members in fairshare_groups if who.user in members)}
        self.entries = frozenset({who.user, *(f"@{g}" for g in groups)})

    def may_see(self, r: ReservationRecord) -> bool:
        return self.everything or not r.users or not self.entries.isdisjoint(r.users)

    def view(self, r: ReservationRecord, now: float) -> dict[str, Any]:
        out = reservation_view(r, now)
        if not self.everything:
            out["users"] = [u for u in r.users if u in self.entries]
            out["users_hidden"] = len(r.users) - len(out["users"])
        return out


def scope_of(request: web.Request) -> ReservationScope:
    return ReservationScope(identity(request), _service(request).settings.scheduler.groups)


async def list_(request: web.Request) -> web.Response:
    service = _service(request)
    now = service.clock()
    scope = scope_of(request)
    found = sorted(service.state.reservations.values(), key=lambda r: (r.start, r.name))
    return json_response({"reservations": [scope.view(r, now) for r in found if scope.may_see(r)]})


async def show(request: web.Request) -> web.Response:
    service = _service(request)
    name = request.match_info["name"]
    r = service.state.reservations.get(name)
    scope = scope_of(request)
    if r is None or not scope.may_see(r):  # another's reads as none: its name tells nothing
        raise NotFound(f"reservation {name!r} does not exist")
    return json_response(scope.view(r, service.clock()))


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
