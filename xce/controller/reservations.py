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
from xce.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.core.model import ReservationRecord
from xce.core.reservations import check_reservation, may_use

if TYPE_CHECKING:
    from xce.controller.service import ControllerService
    from xce.core.state import ClusterState


def check_target(
    reservations: Mapping[str, ReservationRecord], name: str, user: str, groups: Iterable[str]
) -> None:
    """Refuse at submit a job that names a reservation it could never run in: unknown or
    ended (400), for maintenance or for other users (403). A waiting one is fine: the job
    pends until it starts."""
    r = reservations.get(name)
    if r is None:
        raise InvalidRequest(f"reservation {name!r} does not exist (xce rsv list)")
    if r.maintenance:
        raise Forbidden(f"reservation {name} is a maintenance reservation: no job may run in it")
    if not may_use(r, user, list(groups)):
        raise Forbidden(
            f"user {user} may not use reservation {name} (it is for {', '.join(r.users)})"
        )


def running_into(state: ClusterState, r: ReservationRecord) -> str | None:
    """Why `r` cannot be made as things stand: an active job on one of its hosts would still
    hold slots the reservation needs when it starts (by its walltime; none: forever), as
    Slurm refuses such a reservation unless IGNORE_JOBS. None when nothing is in the way."""
    for name in r.hosts:
        host = state.hosts.get(name)
        if host is None:
            continue
        room = 0 if r.slots == 0 else host.slots - r.slots
        used = 0
        for job_id in sorted(state.jobs_on(name)):
            job = state.jobs[job_id]
            wall = job.spec.walltime_s
            ends = float("inf") if wall is None or job.start_time is None else job.start_time + wall
            if ends <= r.start:
                continue
            used += job.spec.slots
            if r.slots == 0 or used > room:
                return (
                    f"job {job_id} on host {name} will still be running at the "
                    "reservation's start (by its walltime): wait for it, or add the "
                    "ignore_jobs flag"
                )
    return None


def expired_reservations(state: ClusterState, cutoff: float) -> list[str]:
    """Retention: reservations that ended before `cutoff`. The primary deletes them with
    `ReservationDeleted` events before a checkpoint, beside the finished jobs it purges
    (`ControllerService.purge_finished`), so every node drops them at the same record."""
    return [name for name, r in state.reservations.items() if r.end < cutoff]


async def add_reservation(
    service: ControllerService, record: ReservationRecord
) -> ReservationRecord:
    """Commit a new reservation; its hosts must be registered and it must not have ended."""
    now = service.clock()
    unknown = [h for h in record.hosts if h not in service.state.hosts]
    if unknown:
        raise InvalidRequest(f"host {unknown[0]!r} is not registered (xce host list)")
    # slots are per host: more than a host has would be stored and shown as if it held
    small = [h for h in record.hosts if record.slots > service.state.hosts[h].slots]
    if small:
        host = service.state.hosts[small[0]]
        raise InvalidRequest(
            f"slots: {record.slots} per host is more than host {host.name} "
            f"has ({host.slots}); 0 reserves whole hosts"
        )
    if record.end <= now:
        raise InvalidRequest("the reservation would end in the past")
    check_reservation(record, service.state.reservations)  # the 4xx before the commit
    if "ignore_jobs" not in record.flags:
        clash = running_into(service.state, record)
        if clash is not None:
            raise Conflict(clash)
    await service.commit([ev.ReservationAdded(now, record)])
    return service.state.reservations[record.name]


async def delete_reservation(service: ControllerService, name: str) -> None:
    if name not in service.state.reservations:
        raise NotFound(f"reservation {name!r} does not exist")
    await service.commit([ev.ReservationDeleted(service.clock(), name)])
