"""`ControllerService`: decides which events a request means and commits them.

Each command validates against the current state, builds events, and hands them to
`commit`, which applies them to `ClusterState` and appends them to the event log in the same
synchronous step (so log order is apply order) and then awaits durability before the caller
acknowledges. Nothing awaits between reading the state and applying the events, so
concurrent requests on one event loop cannot interleave their decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from xce.accounting.feed import AccountingFeed
from xce.config import ControllerSettings
from xce.controller.admin import Administration
from xce.controller.job_actions import JobActions
from xce.controller.numbers import NumberReserver
from xce.controller.requests import SubmitRequest
from xce.controller.reservations import expired_reservations
from xce.controller.scheduling import Planner, Scheduling
from xce.controller.submission import Submissions
from xce.core import events as ev
from xce.core.model import (
    QueueRecord,
)
from xce.core.state import ClusterState
from xce.sched import pipeline
from xce.sched.reasons import ReasonTexts
from xce.sched.usage import UsageLedger
from xce.store.files import FileStore
from xce.store.log import EventLog, MemoryEventLog

PURGE_CHUNK = 10_000  # ids per JobsPurged record: ~100 KiB, far below a frame's limit


class FileReplica(Protocol):
    """What the service needs of the replication source to ship job files."""

    def ship(self, ops: list[tuple[str, str]]) -> int: ...

    async def wait_files(self, ticket: int) -> None: ...


class ControllerService:
    """The controller's commands and the notifications its loops and long-polls wait on."""

    def __init__(
        self,
        settings: ControllerSettings,
        files: FileStore,
        state: ClusterState | None = None,
        log: EventLog | None = None,
        clock: Callable[[], float] = time.time,
        planner: Planner = pipeline.plan,
    ) -> None:
        self.settings = settings
        self.files = files
        self.state = state or ClusterState()
        self.log = log or MemoryEventLog()
        self.clock = clock
        self.host_versions: dict[str, int] = {}
        self._host_waiters: dict[str, asyncio.Event] = {}
        self.schedule_needed = asyncio.Event()
        self.listeners: list[Callable[[ev.Event], None]] = []
        # Called with each batch once it is durable (the live event stream, xce/controller/bus)
        self.committed: list[Callable[[list[ev.Event]], None]] = []
        # Fairshare: decayed usage of finished jobs, fed by every committed event.
        self.usage = UsageLedger(settings.scheduler.fairshare_half_life_s)
        self.usage.seed(self.state)
        self.listeners.append(lambda event: self.usage.observe(event, self.state))
        # The scheduling pass, whose snapshot cache listens to every event from here on
        self.scheduling = Scheduling(self, planner)
        # Set by the WorkerGateway: until when a job of an unreachable host may still run
        # there (None: no fence in force). A requeue by hand waits for it, as liveness does.
        self.fence_until: Callable[[str], float | None] = lambda host: None
        # Job numbers from replicated reservations (xce/controller/numbers.py); set by a
        # primary that has standbys.
        self.numbers: NumberReserver | None = None
        # Job files to the standbys (xce/ha/files.py): the replication source of a primary
        # that has standbys; None ships nothing (a single controller).
        self.file_replica: FileReplica | None = None
        # The accounting feed (xce/accounting/feed.py): records of ended attempts, staged
        # as events apply and stored off the request path once durable. None: no accounting.
        self.accounting: AccountingFeed | None = None
        self.submissions = Submissions(self)
        self.job_actions = JobActions(self)
        self.admin = Administration(self)

    def ship_files(self, ops: list[tuple[str, str]]) -> int:
        """Queue job files for the standbys, ahead of the records committed after this."""
        return self.file_replica.ship(ops) if self.file_replica is not None else 0

    async def files_replicated(self, ticket: int) -> None:
        """In sync mode: until a standby holds the files shipped up to `ticket`."""
        if self.file_replica is not None and ticket:
            await self.file_replica.wait_files(ticket)

    # --- committing ---------------------------------------------------------------------

    async def commit(self, events: Iterable[ev.Event], reschedule: bool = True) -> None:
        """Apply and log `events` in order, then wait until they are durable.

        All or nothing: the whole batch is encoded and tried on a scratch state first
        (`ClusterState.check`), so an event that fails leaves the state, the WAL, the
        wake-ups and the committed hooks exactly as they were, and an event that passes is
        never left applied without being logged and announced.

        `reschedule=False` is for changes that cannot free or need resources (usage reports).
        """
        self.log.check_writable()
        batch = list(events)
        if not batch:
            return
        records = [self.log.prepare(event, i) for i, event in enumerate(batch)]
        if len(batch) > 1:
            self.state.check(batch)  # one event is all-or-nothing in `apply` itself
        touched: set[str] = set()
        feed = self.accounting
        for event, record in zip(batch, records, strict=True):
            before = self._hosts_of(event)
            if feed is not None:
                feed.before(self.state, event)
            self.state.apply(event)
            self.log.append(record)
            if feed is not None:
                feed.after(self.state, event, self.state.applied)
            touched.update(before)
            touched.update(self._hosts_of(event))
            for listener in self.listeners:
                listener(event)
        for host in touched:
            self._bump(host)
        if reschedule:
            self.schedule_needed.set()
        await self.log.sync()
        if feed is not None:
            feed.durable(self.state.applied)
        for hook in self.committed:
            hook(batch)

    def _hosts_of(self, event: ev.Event) -> tuple[str, ...]:
        """The hosts whose assignments `event` may change: a job's every host (a multi-host
        job's others hold its share, xce/worker/shares.py), or the host itself."""
        if isinstance(event, ev.JobStarted):
            return tuple(p.host for p in event.hosts) or (event.host,)
        job_id = getattr(event, "job_id", None)
        if job_id is not None:
            job = self.state.jobs.get(job_id)
            if job is None or not job.host:
                return ()
            return tuple(p.host for p in job.allocation) or (job.host,)
        if isinstance(event, (ev.HostRegistered, ev.HostAvailable, ev.HostUnavailable)):
            return (event.name,)
        return ()

    def _bump(self, host: str) -> None:
        self.host_versions[host] = self.host_versions.get(host, 0) + 1
        waiter = self._host_waiters.pop(host, None)
        if waiter is not None:
            waiter.set()

    def wake_all(self) -> None:
        for host in list(self._host_waiters):
            self._bump(host)

    async def wait_host_change(self, host: str, version: int, timeout: float) -> None:
        """Long-poll helper: return when the host's version passes `version` or on timeout."""
        if self.host_versions.get(host, 0) != version:
            return
        waiter = self._host_waiters.setdefault(host, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter.wait(), timeout)

    # --- submission ---------------------------------------------------------------------

    async def submit(self, req: SubmitRequest) -> str:
        """Validate and enqueue a job or array; returns its id once durable."""
        return (await self.submit_keyed(req, ""))[0]

    async def submit_keyed(self, req: SubmitRequest, key: str) -> tuple[str, bool]:
        """`submit` with an Idempotency-Key (xce/controller/submission.py): a repeat of a
        key returns the first submission's id and True."""
        return await self.submissions.submit_keyed(req, key)

    # --- job control --------------------------------------------------------------------

    async def control(self, job_id: str, action: str, owner: str | None = None) -> list[str]:
        """stop / resume / requeue / kill one job, one task, or a whole array
        (xce/controller/job_actions.py); with `owner` set, only that user's jobs."""
        return await self.job_actions.control(job_id, action, owner)

    async def modify_job(
        self,
        job_id: str,
        changes: dict[str, object],
        privileged: bool,
        may_view_owner: Callable[[str], bool] | None = None,
        defer: bool = False,
    ) -> list[ev.Event]:
        """`xce job modify`: validated and committed as events (xce/controller/modify.py)."""
        return await self.job_actions.modify(job_id, changes, privileged, may_view_owner, defer)

    # --- queues and hosts (xce/controller/admin.py) ----------------------------------------

    async def create_queue(self, queue: QueueRecord) -> QueueRecord:
        return await self.admin.create_queue(queue)

    async def modify_queue(self, name: str, changes: dict[str, object]) -> QueueRecord:
        """New settings for a queue; its jobs keep what they were submitted with."""
        return await self.admin.modify_queue(name, changes)

    async def delete_queue(self, name: str) -> None:
        """Delete a queue no live job is in; finished jobs keep its name."""
        await self.admin.delete_queue(name)

    async def queue_action(self, name: str, action: str) -> QueueRecord:
        return await self.admin.queue_action(name, action)

    async def host_action(self, name: str, action: str, reason: str = "") -> None:
        await self.admin.host_action(name, action, reason)

    # --- retention ----------------------------------------------------------------------

    async def purge_finished(self, cutoff: float) -> int:
        """Drop the finished jobs and arrays that ended before `cutoff`; returns how many.

        The primary's `DurableLog` calls this before each checkpoint. The purge is an event
        through `commit` like any other change, so standbys drop the same jobs at the same
        record instead of on their own clocks (where a requeue of a job a standby had
        already purged could not apply). Choosing and committing happen with no await in
        between, so no request can change a chosen job first.
        """
        ids = self.state.purgeable(cutoff)
        # Reservations that ended before the cutoff go the same way (xce/controller/
        # reservations.py): until then `xce rsv list` shows them as ended.
        ended = expired_reservations(self.state, cutoff)
        if ids or ended:
            now = self.clock()
            await self.commit(
                [
                    *(
                        ev.JobsPurged(now, tuple(ids[i : i + PURGE_CHUNK]))
                        for i in range(0, len(ids), PURGE_CHUNK)
                    ),
                    *(ev.ReservationDeleted(now, name) for name in ended),
                ],
                reschedule=False,
            )
        return len(ids)

    # --- scheduling (xce/controller/scheduling.py) ----------------------------------------

    async def schedule_once(self) -> int:
        """One scheduling pass: plan on a snapshot, then commit the placements."""
        return await self.scheduling.schedule_once()

    @property
    def reasons(self) -> ReasonTexts:
        """Why each pending job waits, as the last pass found."""
        return self.scheduling.reasons

    @property
    def stats(self) -> dict[str, float]:
        """Scheduling passes, the last one's duration, events dispatched."""
        return self.scheduling.stats
