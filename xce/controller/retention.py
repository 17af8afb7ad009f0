"""Retention: the events that drop finished jobs, arrays and ended reservations.

What `ControllerService.purge_finished` (xce/controller/service.py) commits. The primary's
`DurableLog` purges before each checkpoint, and the purge is an event like any other change,
so standbys drop the same jobs at the same record instead of on their own clocks (where a
requeue of a job a standby had already purged could not apply)."""

from __future__ import annotations

from collections.abc import Callable

from xce.controller.reservations import expired_reservations
from xce.core import events as ev
from xce.core.state import ClusterState

PURGE_CHUNK = 10_000  # ids per JobsPurged record: ~100 KiB, far below a frame's limit


def purge_events(
    state: ClusterState, cutoff: float, clock: Callable[[], float]
) -> tuple[list[ev.Event], int]:
    """The events that purge what ended before `cutoff`, and how many jobs they drop.

    Reservations that ended before the cutoff go the same way (xce/controller/
    reservations.py): until then `xce rsv list` shows them as ended. `clock` is read only
    when there is something to purge.
    """
    ids = state.purgeable(cutoff)
    ended = expired_reservations(state, cutoff)
    if not ids and not ended:
        return [], 0
    now = clock()
    events: list[ev.Event] = [
        ev.JobsPurged(now, tuple(ids[i : i + PURGE_CHUNK])) for i in range(0, len(ids), PURGE_CHUNK)
    ]
    events.extend(ev.ReservationDeleted(now, name) for name in ended)
    return events, len(ids)
