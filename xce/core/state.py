"""`ClusterState`: the whole controller state in memory, changed only by `apply(event)`.

`apply` validates an event completely before it mutates anything, so an event that raises
leaves the state exactly as it was. Derived indexes (pending jobs, host load, array counters)
are kept up to date in one place, `_put_job` (xce/core/state_index.py), so they can never
drift from the records.

The class is assembled from its seams: the containers and lookups (state_base.py), the index
keeper (state_index.py), the job lifecycle handlers (state_jobs.py) and the other handlers
(state_admin.py). This module wires the handler table, `apply`, `check` and `restore`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xce.core import eligibility
from xce.core import events as ev
from xce.core.errors import InvalidRequest
from xce.core.model import (
    ArrayRecord,
    HostAdmin,
    HostRecord,
    JobRecord,
    QueueRecord,
    ReservationRecord,
)
from xce.core.scratch import Overlay
from xce.core.state_admin import AdminEvents
from xce.core.state_jobs import JobEvents

__all__ = ["ClusterState"]

# Every container `apply` may change; `check` sees them through overlays.
_CONTAINERS = (
    "jobs",
    "arrays",
    "queues",
    "hosts",
    "host_load",
    "pending",
    "pending_arrays",
    "array_tasks",
    "finished_jobs",
    "waiting_on_deps",
    "counts",
    "submit_keys",
    "reservations",
    "dependents",
)
_NESTED = ("array_tasks", "dependents")  # containers whose values change in place


class ClusterState(JobEvents, AdminEvents):
    """The single writer of controller state; see the module docstring for its promises."""

    def __init__(self) -> None:
        super().__init__()
        self._handlers = self._handler_table()

    def _handler_table(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> the method that applies it."""
        return {
            ev.QueueCreated: self._queue_created,
            ev.QueueOpened: lambda e: self._queue_set(e.name, open=True),
            ev.QueueClosed: lambda e: self._queue_set(e.name, open=False),
            ev.QueueActivated: lambda e: self._queue_set(e.name, active=True),
            ev.QueueDeactivated: lambda e: self._queue_set(e.name, active=False),
            ev.QueueModified: self._queue_modified,
            ev.QueueDeleted: self._queue_deleted,
            ev.HostRegistered: self._host_registered,
            ev.HostOpened: lambda e: self._host_set(e, admin=HostAdmin.OPEN, admin_reason=""),
            ev.HostClosed: lambda e: self._host_set(
                e, admin=HostAdmin.CLOSED, admin_reason=e.reason
            ),
            ev.HostDrainStarted: lambda e: self._host_set(
                e, admin=HostAdmin.DRAINING, admin_reason=e.reason
            ),
            ev.HostUnavailable: lambda e: self._host_set(e, reachable=False),
            ev.HostAvailable: lambda e: self._host_set(e, reachable=True),
            ev.JobSubmitted: self._job_submitted,
            ev.ArraySubmitted: self._array_submitted,
            ev.JobStarted: self._job_started,
            ev.JobSuspended: self._job_suspended,
            ev.JobResumed: self._job_resumed,
            ev.JobKillRequested: self._job_kill_requested,
            ev.JobKilled: self._job_killed,
            ev.JobRequeued: self._job_requeued,
            ev.JobHostLost: self._job_host_lost,
            ev.JobFinished: self._job_finished,
            ev.JobUsageReported: self._job_usage,
            ev.ArrayHeld: lambda e: self._array_hold(e.number, True),
            ev.ArrayReleased: lambda e: self._array_hold(e.number, False),
            ev.ArrayCancelled: self._array_cancelled,
            ev.JobsPurged: self._jobs_purged,
            ev.JobNumbersReserved: self._numbers_reserved,
            ev.ReservationAdded: self._reservation_added,
            ev.ReservationDeleted: self._reservation_deleted,
            ev.JobModified: self._job_modified,
            ev.JobPreempted: self._job_preempted,
        }

    def apply(self, event: ev.Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise InvalidRequest(f"unknown event type {type(event).__name__}")
        self._at = event.at
        handler(event)
        self.applied += 1

    def check(self, events: Sequence[ev.Event]) -> None:
        """Raise what applying `events` in order would raise, changing nothing.

        `apply` keeps one event all-or-nothing; a batch needs this too (a commit, a batch of
        replicated records): the events are applied to a scratch state whose containers are
        overlays of these (`xce.core.scratch`), which costs what the batch changes, not a
        copy of the state.
        """
        scratch = ClusterState()
        for name in _CONTAINERS:
            setattr(scratch, name, Overlay(getattr(self, name), nested=name in _NESTED))
        scratch.next_number = self.next_number
        scratch.number_ceiling = self.number_ceiling
        for event in events:
            scratch.apply(event)

    @classmethod
    def restore(
        cls,
        jobs: list[JobRecord],
        arrays: list[ArrayRecord],
        queues: list[QueueRecord],
        hosts: list[HostRecord],
        next_number: int,
        number_ceiling: int = 0,
        reservations: Sequence[ReservationRecord] = (),
    ) -> ClusterState:
        """Rebuild a state from checkpointed records; derived indexes are recomputed."""
        state = cls()
        state.reservations = {r.name: r for r in reservations}
        state.queues = {q.name: q for q in queues}
        state.hosts = {h.name: h for h in hosts}
        state.arrays = {a.id: a for a in arrays}
        state.pending_arrays = {a.id: None for a in arrays if a.pending}
        state.submit_keys = {(a.spec.user, a.submit_key): str(a.id) for a in arrays if a.submit_key}
        state._index_restored(sorted(jobs, key=lambda j: j.order_key))
        for a in arrays:
            eligibility.watch_array(state, a)
        state.next_number = next_number
        state.number_ceiling = number_ceiling
        return state
