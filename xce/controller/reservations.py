"""The service side of advance reservations: requests -> `ReservationAdded` /
`ReservationDeleted` events, and the submit-time check of a job that targets one.

Kept beside `ControllerService` rather than in it (module functions taking the service), so
the service's own file changes by two calls. Creating and deleting need `host:admin`
(admins and operators, checked by the route table); listing needs `host:view` (users).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from xce.core import events as ev
from xce.core.errors import Forbidden, InvalidRequest, NotFound
from xce.core.model import ReservationRecord
from xce.core.reservations import check_reservation, may_use

if TYPE_CHECKING:
    from xce.controller.service import ControllerService
    from xce.core.state import ClusterState


def check_target(reservations: Mapping[str, ReservationRecord], name: str, user: str,
                 groups: Iterable[str]) -> None:
    """Refuse at submit a job that names a reservation it could never run in: unknown or
    ended (400), for maintenance or for other users (403). A waiting one is fine: the job
    pends until it starts."""
    r = reservations.get(name)
    if r is None:
        raise InvalidRequest(f"reservation {name!r} does not exist (xce rsv list)")
    if r.maintenance:
        raise Forbidden(f"reservation {name} is a maintenance reservation: no job may run "
                        "in it")
    if not may_use(r, user, list(groups)):
        raise Forbidden(f"user {user} may not use reservation {name} (it is for "
                        f"{', '.join(r.users)})")


def expired_reservations(state: ClusterState, cutoff: float) -> list[str]:
    """Retention: reservations that ended before `cutoff`. The primary deletes them with
    `ReservationDeleted` events before a checkpoint, beside the finished jobs it purges
    (`ControllerService.purge_finished`), so every node drops them at the same record."""
    return [name for name, r in state.reservations.items() if r.end < cutoff]


async def add_reservation(service: ControllerService, record: ReservationRecord
                          ) -> ReservationRecord:
    """Commit a new reservation; its hosts must be registered and it must not have ended."""
    now = service.clock()
    unknown = [h for h in record.hosts if h not in service.state.hosts]
    if unknown:
        raise InvalidRequest(f"host {unknown[0]!r} is not registered (xce host list)")
    if record.end <= now:
        raise InvalidRequest("the reservation would end in the past")
    check_reservation(record, service.state.reservations)  # the 4xx before the commit
    await service.commit([ev.ReservationAdded(now, record)])
    return service.state.reservations[record.name]


async def delete_reservation(service: ControllerService, name: str) -> None:
    if name not in service.state.reservations:
        raise NotFound(f"reservation {name!r} does not exist")
    await service.commit([ev.ReservationDeleted(service.clock(), name)])
