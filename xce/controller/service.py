"""`ControllerService`: decides which events a request means and commits them.

Each command validates against the current state, builds events, and hands them to
`commit`, which applies them to `ClusterState` and appends them to the event log in the same
synchronous step (so log order is apply order) and then awaits durability before the caller
acknowledges. Nothing awaits between reading the state and applying the events, so
concurrent requests on one event loop cannot interleave their decisions.

The service owns what every command shares (state, log, clock, `commit` and its hooks) and
keeps the public commands; each kind of command is worked out by a collaborator that holds
the service: submission (xce/controller/submission.py, with the stateless checks in
submit_checks.py), job control and modify (job_actions.py), queue and host administration
(admin.py), the scheduling pass (scheduling.py), retention (retention.py), and the workers'
long-poll wake-ups (host_changes.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from xce.accounting.feed import AccountingFeed
from xce.config.settings import ControllerSettings
from xce.controller.admin import Administration
from xce.controller.host_changes import HostChanges, hosts_of
from xce.controller.job_actions import JobActions
from xce.controller.job_files import JobFileDeletion
from xce.controller.numbers import NumberReserver
from xce.controller.requests import SubmitRequest
from xce.controller.retention import purge_events
from xce.controller.scheduling import Planner, Scheduling
from xce.controller.submission import Submissions
from xce.core import events as ev
from xce.core.applier import Applier, Observer
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched import plugins
from xce.sched.passes import pipeline
from xce.sched.plugins import PluginRegistry
from xce.sched.predict import RuntimeHistory
from xce.sched.reasons import ReasonTexts
from xce.sched.usage import UsageLedger
from xce.store.files import FileStore
from xce.store.log import EventLog, MemoryEventLog


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
        registry: PluginRegistry | None = None,
        observers: Iterable[Observer] = (),
    ) -> None:
        self.settings = settings
        self.files = files
        self.state = state or ClusterState()
        self.log = log or MemoryEventLog()
        self.clock = clock
        # The scheduler plugins queues may choose: the pass, preemption and queue checks
        # ask this registry (chosen by xce/server/compose.py; the built-in one here).
        self.registry = registry or plugins.builtin()
        # Per-host versions that the workers' long-polls wait on, bumped by `commit`
        self.host_changes = HostChanges()
        self.host_versions = self.host_changes.versions
        self.schedule_needed = asyncio.Event()
        self.listeners: list[Callable[[ev.Event], None]] = []
        # Called with each batch once it is durable (the live event stream, xce/controller/bus)
        self.committed: list[Callable[[list[ev.Event]], None]] = []
        # Fairshare: decayed usage of finished jobs, fed by every committed event.
        self.usage = UsageLedger(settings.scheduler.fairshare_half_life_s)
        self.usage.seed(self.state)
        self.listeners.append(lambda event: self.usage.observe(event, self.state))
        # Run-time predictions (xce/sched/predict.py): each user's last run times and each
        # running job's prediction, rebuilt from the held jobs and fed by every event
        self.predictions = RuntimeHistory()
        self.predictions.seed(self.state)
        self.listeners.append(lambda event: self.predictions.observe(event, self.state))
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
        # Applies each committed event with the observers handed in by the composition
        # (xce/core/applier.py): the accounting feed among them (`accounting`).
        self.applier = Applier(self.state, observers)
        self._accounting: AccountingFeed | None = None
        self.submissions = Submissions(self)
        # Job files go after the events that end their use (purge, kill before start)
        self.job_files = JobFileDeletion(self)
        self.committed.append(self.job_files.committed)
        self.job_actions = JobActions(self)
        self.admin = Administration(self)

    @property
    def accounting(self) -> AccountingFeed | None:
        """The accounting feed (xce/accounting/feed.py): records of ended attempts, staged
        as events apply and stored off the request path once durable. None: no accounting.
        Setting it replaces the previous feed among the applier's observers."""
        return self._accounting

    @accounting.setter
    def accounting(self, feed: AccountingFeed | None) -> None:
        old, self._accounting = self._accounting, feed
        kept = tuple(o for o in self.applier.observers if o is not old)
        self.applier.observers = kept if feed is None else (*kept, feed)

    def ship_files(self, ops: list[tuple[str, str]]) -> int:
        """Queue job files for the standbys, ahead of the records committed after this."""
        return self.file_replica.ship(ops) if self.file_replica is not None else 0

    async def files_replicated(self, ticket: int) -> None:
        """In sync mode: until a standby holds the files shipped up to `ticket`."""
        if self.file_replica is not None and ticket:
            await self.file_replica.wait_files(ticket)

    # --- committing ---------------------------------------------------------------------

    async def commit(
        self, events: Iterable[ev.Event], reschedule: bool = True, told: str = ""
    ) -> None:
        """Apply and log `events` in order, then wait until they are durable.

        All or nothing: the whole batch is encoded and tried on a scratch state first
        (`ClusterState.check`), so an event that fails leaves the state, the WAL, the
        wake-ups and the committed hooks exactly as they were, and an event that passes is
        never left applied without being logged and announced.

        `reschedule=False` is for changes that cannot free or need resources (usage reports).
        `told`: the host whose own report the events record (an attempt it says has ended):
        its long-poll is not woken for them, since its answer would only tell it what it
        said; the job's other hosts are.
        """
        self.log.check_writable()
        batch = list(events)
        if not batch:
            return
        records = [self.log.prepare(event, i) for i, event in enumerate(batch)]
        if len(batch) > 1:
            self.state.check(batch)  # one event is all-or-nothing in `apply` itself
        for host in self._apply(batch, records):
            if host != told:
                self.host_changes.bump(host)
        if reschedule:
            self.schedule_needed.set()
        await self.log.sync()
        self.applier.durable(self.state.applied)
        for hook in self.committed:
            hook(batch)

    def _apply(self, batch: list[ev.Event], records: list[Any]) -> set[str]:
        """Apply and append each event of a checked batch, telling the applier's observers
        (the accounting feed stages its records) and the listeners; returns the hosts the
        batch touched."""
        touched: set[str] = set()
        applier = self.applier
        for event, record in zip(batch, records, strict=True):
            before = hosts_of(self.state, event)
            applier.begin(event)
            self.log.append(record)  # before the `after` hooks: they see a logged event
            applier.finish(event, self.state.applied)
            touched.update(before)
            touched.update(hosts_of(self.state, event))
            for listener in self.listeners:
                listener(event)
        return touched

    def wake_all(self) -> None:
        """Every worker's long-poll returns now (xce/controller/host_changes.py)."""
        self.host_changes.wake_all()

    async def wait_host_change(self, host: str, version: int, timeout: float) -> None:
        """Long-poll helper: return when the host's version passes `version` or on timeout."""
        await self.host_changes.wait(host, version, timeout)

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
        through `commit` like any other change (xce/controller/retention.py), so standbys
        drop the same jobs at the same record. Choosing and committing happen with no await
        in between, so no request can change a chosen job first.
        """
        events, purged = purge_events(self.state, cutoff, self.clock)
        if events:
            await self.commit(events, reschedule=False)
        return purged

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
