"""`ClusterState`: the whole controller state in memory, changed only by `apply(event)`.

`apply` validates an event completely before it mutates anything, so an event that raises
leaves the state exactly as it was. Derived indexes (pending jobs, host load, array counters)
are kept up to date in one place, `IndexKeeper.put_job` (xce/core/state_index.py), so they
can never drift from the records.

The state holds its parts, none of which inherits another: its data (`StateData`, the
containers, the numbering and the lookups; state_base.py), the index keeper over that data
(state_index.py), the job lifecycle handlers (state_jobs.py) and the other handlers
(state_admin.py). Each part is made with what it needs and binds it at construction, and the
handler table holds their bound methods, so applying an event costs what a method of one
class did. The containers are the data's own objects, shared by reference: the state exposes
them as attributes (`state.jobs`, ...) for readers, and one is replaced only by making a new
state over new data (`restore`, `check`), never by assigning it on a live state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xce.core import eligibility
from xce.core import events as ev
from xce.core.errors import InvalidRequest
from xce.core.model import (
    ArrayRecord,
    HostRecord,
    JobRecord,
    QueueRecord,
    ReservationRecord,
)
from xce.core.scratch import Overlay
from xce.core.state_admin import AdminEvents
from xce.core.state_base import StateData
from xce.core.state_index import IndexKeeper
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


class ClusterState:
    """The single writer of controller state; see the module docstring for its promises."""

    def __init__(self, data: StateData | None = None) -> None:
        """A state over `data` (its containers as they are), or over empty data."""
        data = StateData() if data is None else data
        self._data = data
        self._keeper = keeper = IndexKeeper(data)
        self._job_events = job_events = JobEvents(data, keeper)
        self._admin_events = admin_events = AdminEvents(data, keeper)
        self._handlers: dict[type, Callable[[Any], None]] = {
            **admin_events.handlers(),
            **job_events.handlers(),
        }
        self.applied = 0
        # The containers, for readers: the data's own objects.
        self.jobs = data.jobs
        self.arrays = data.arrays
        self.queues = data.queues
        self.hosts = data.hosts
        self.reservations = data.reservations
        self.submit_keys = data.submit_keys
        self.host_load = data.host_load
        self.pending = data.pending
        self.pending_arrays = data.pending_arrays
        self.array_tasks = data.array_tasks
        self.finished_jobs = data.finished_jobs
        self.waiting_on_deps = data.waiting_on_deps
        self.counts = data.counts
        self.dependents = data.dependents
        # The lookups (StateData) and the writes others reach for (the index keeper).
        self.job = data.job
        self.outcome = data.outcome
        self.queue = data.queue
        self.host = data.host
        self.array = data.array
        self.tasks_of = data.tasks_of
        self.jobs_on = data.jobs_on
        self.licenses_in_use = data.licenses_in_use
        self.live_jobs_in = data.live_jobs_in
        self.purgeable = admin_events.purgeable
        self._put_job = keeper.put_job
        self._index_restored = keeper.index_restored

    @property
    def next_number(self) -> int:
        """The number the next submitted job or array takes."""
        return self._data.next_number

    @next_number.setter
    def next_number(self, value: int) -> None:
        self._data.next_number = value

    @property
    def number_ceiling(self) -> int:
        """The highest job number reserved (JobNumbersReserved); 0: numbers are not reserved."""
        return self._data.number_ceiling

    @number_ceiling.setter
    def number_ceiling(self, value: int) -> None:
        self._data.number_ceiling = value

    def apply(self, event: ev.Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise InvalidRequest(f"unknown event type {type(event).__name__}")
        self._data.at = event.at
        handler(event)
        self.applied += 1

    def check(self, events: Sequence[ev.Event]) -> None:
        """Raise what applying `events` in order would raise, changing nothing.

        `apply` keeps one event all-or-nothing; a batch needs this too (a commit, a batch of
        replicated records): the events are applied to a scratch state whose containers are
        overlays of these (`xce.core.scratch`), which costs what the batch changes, not a
        copy of the state.
        """
        data, ours = StateData(), self._data
        for name in _CONTAINERS:
            setattr(data, name, Overlay(getattr(ours, name), nested=name in _NESTED))
        data.next_number = ours.next_number
        data.number_ceiling = ours.number_ceiling
        scratch = ClusterState(data)
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
        data = StateData()
        # Records of a build before eligible times were kept (xce/core/eligibility.py)
        jobs = [eligibility.restored_job(j) if j.eligible_time is None else j for j in jobs]
        arrays = [eligibility.restored_array(a) for a in arrays]
        data.reservations = {r.name: r for r in reservations}
        data.queues = {q.name: q for q in queues}
        data.hosts = {h.name: h for h in hosts}
        data.arrays = {a.id: a for a in arrays}
        data.pending_arrays = {a.id: None for a in arrays if a.pending}
        data.submit_keys = {(a.spec.user, a.submit_key): str(a.id) for a in arrays if a.submit_key}
        data.next_number = next_number
        data.number_ceiling = number_ceiling
        state = cls(data)
        keeper = state._keeper
        keeper.index_restored(sorted(jobs, key=lambda j: j.order_key))
        for a in arrays:
            eligibility.watch_array(keeper, a)
        return state
