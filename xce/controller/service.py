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
import dataclasses
import itertools
import pwd
import re
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from xce import metrics
from xce.accounting.feed import AccountingFeed
from xce.config import ControllerSettings
from xce.controller import gres_rules, queue_rules
from xce.controller.modify import modify_events
from xce.controller.numbers import NumberReserver
from xce.controller.requests import SubmitRequest
from xce.controller.reservations import check_target, expired_reservations
from xce.controller.uids import UidCache
from xce.core import events as ev
from xce.core import lifecycle
from xce.core.arrayspec import parse_array_spec
from xce.core.begin import parse_begin
from xce.core.deps import parse_dependency
from xce.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.core.jobfiles import check_file_pattern
from xce.core.model import (
    HostAdmin,
    HostStatus,
    JobRecord,
    JobSpec,
    JobState,
    QueueRecord,
)
from xce.core.state import ClusterState, parse_job_id
from xce.sched import pipeline, preemption
from xce.sched.expr import parse_requirement
from xce.sched.feasibility import refusal
from xce.sched.incremental import SnapshotCache
from xce.sched.multihost_submit import (
    check_span,
    multi_host_refusal,
    per_slot_memory,
)
from xce.sched.plugins import policy_for
from xce.sched.priority import PrioritySettings, check_job_priority
from xce.sched.reasons import ReasonTexts
from xce.sched.snapshot import free_licenses
from xce.sched.types import Plan
from xce.sched.usage import UsageLedger
from xce.store.files import RESERVED_OUTPUTS, FileStore, safe_relative_path
from xce.store.log import EventLog, MemoryEventLog

IDEMPOTENCY_TTL_S = 24 * 3600.0  # a key also ends with its job (finished-job retention)
USER_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
MAX_MEMORY_MB = 2**40  # as the submit schema's memory_mb (xce/api/bodies.py)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JOB_ACTIONS = ("stop", "resume", "requeue", "kill")
PURGE_CHUNK = 10_000  # ids per JobsPurged record: ~100 KiB, far below a frame's limit
Planner = Callable[..., Plan]


def _clock_text(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


UIDS = UidCache(_uid_of)  # getpwnam per submit was a tenth of its CPU (xce/controller/uids.py)


def check_job_user(settings: ControllerSettings, user: str) -> None:
    """403 when `settings` forbid jobs to run as `user` on this controller's host.

    Root needs `allow_root_jobs`; another uid below `min_job_uid` must be in `job_users`;
    whatever role the submitter has. A name that does not resolve here (a user known only
    on the execution hosts) is left to the worker, which applies the same rule on its host.
    """
    uid = UIDS.uid(user)
    if uid is None:
        return
    if uid == 0:
        if not settings.allow_root_jobs:
            named = user if user == "root" else f"{user} (uid 0)"
            raise Forbidden(
                f"jobs may not run as {named}: the cluster does not allow root "
                "jobs ([controller] allow_root_jobs)"
            )
        return
    if uid < settings.min_job_uid and user not in settings.job_users:
        raise Forbidden(
            f"jobs may not run as {user}: uid {uid} is below [controller] "
            f"min_job_uid = {settings.min_job_uid} and {user} is not in "
            "[controller] job_users"
        )


def _check_text(field: str, value: str | None) -> None:
    """Refuse text no command line, environment or file name can hold (NUL), or that is not
    valid Unicode (a lone surrogate), at submit, naming the field: accepted, it would fail
    only when the job launches, or when the log encodes it."""
    if value is None:
        return
    if "\x00" in value:
        raise InvalidRequest(f"{field} contains a NUL byte, which a job cannot be given")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode text (a lone surrogate)") from None


def _check_texts(req: SubmitRequest) -> None:
    """`_check_text` for every string field of a submit."""
    for field in (
        "user",
        "command",
        "script",
        "name",
        "queue",
        "cwd",
        "array",
        "dependency",
        "submit_host",
        "resources",
        "stdout_file",
        "stderr_file",
        "reservation",
    ):
        _check_text(field, getattr(req, field))
    for key, value in req.env.items():
        _check_text("an env variable name", key)
        _check_text(f"env variable {key}", value)
    for path, upload_id in req.inputs.items():
        _check_text("an input path", path)
        _check_text(f"the upload id of input {path}", upload_id)
    for pattern in req.outputs:
        _check_text("an output pattern", pattern)


def _check_command(req: SubmitRequest) -> None:
    """Exactly one of command or script, and not blank."""
    if (req.command is None) == (req.script is None):
        raise InvalidRequest("give exactly one of command or script")
    body = req.command if req.command is not None else req.script
    if not body or not body.strip():
        raise InvalidRequest("the command or script is empty")


def _memory_asked(req: SubmitRequest) -> int:
    """Slots and walltime in range, and the memory per host the job asks: memory_mb,
    else `rusage[mem=N]` of its resource requirement, or per slot times slots."""
    if req.slots < 1:
        raise InvalidRequest("slots must be at least 1")
    memory_mb = req.memory_mb
    if req.resources.strip():
        requirement = parse_requirement(req.resources)  # ExprError names the column
        check_span(requirement, req.slots)
        reserved = next((r.value for r in requirement.rusage if r.name == "mem"), None)
        if reserved is not None and reserved > MAX_MEMORY_MB:
            raise InvalidRequest(
                f"resources: rusage[mem={reserved:g}] is more than the limit of {MAX_MEMORY_MB} MB"
            )
        if reserved is not None and memory_mb == 0:
            memory_mb = int(reserved)
    if req.memory_mb < 0:
        raise InvalidRequest("memory_mb may not be negative")
    if req.mem_per_slot_mb:
        memory_mb = per_slot_memory(req.memory_mb, req.mem_per_slot_mb, req.slots)
    if req.walltime_s is not None and req.walltime_s < 1:
        raise InvalidRequest("walltime_s must be at least 1 second")
    return memory_mb


def _check_environment(req: SubmitRequest) -> None:
    """Variable names a shell takes (XCE_ ones are ours), an absolute cwd, and output
    file patterns."""
    for key in req.env:
        if not ENV_NAME.match(key):
            raise InvalidRequest(f"environment variable name {key!r} is not valid")
        if key.startswith("XCE_"):
            raise InvalidRequest(f"environment variable {key} is reserved for XCE")
    if req.cwd is not None and not req.cwd.startswith("/"):
        raise InvalidRequest("cwd must be an absolute path on the execution host")
    for what, pattern in (("stdout", req.stdout_file), ("stderr", req.stderr_file)):
        check_file_pattern(what, pattern)


def _outputs(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The output patterns as safe relative paths, none of them a reserved name."""
    outputs = tuple(safe_relative_path(p, "output pattern") for p in patterns)
    for out in outputs:
        if out in RESERVED_OUTPUTS:
            raise InvalidRequest(f"output {out!r} is reserved for the job's {out}")
    return outputs


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
        self.planner = planner
        self.reasons = ReasonTexts()  # why pending jobs wait, rendered when read
        self.host_versions: dict[str, int] = {}
        self._host_waiters: dict[str, asyncio.Event] = {}
        self.schedule_needed = asyncio.Event()
        self.listeners: list[Callable[[ev.Event], None]] = []
        # Called with each batch once it is durable (the live event stream, xce/controller/bus)
        self.committed: list[Callable[[list[ev.Event]], None]] = []
        self.stats = {"scheduling_passes": 0, "last_pass_ms": 0.0, "dispatched": 0}
        # Fairshare: decayed usage of finished jobs, fed by every committed event.
        self.usage = UsageLedger(settings.scheduler.fairshare_half_life_s)
        self.usage.seed(self.state)
        self.listeners.append(lambda event: self.usage.observe(event, self.state))
        self._groups = settings.scheduler.group_map()
        # The scheduler's view, updated by each committed event (xce/sched/incremental.py)
        self._snapshots = SnapshotCache()
        self.listeners.append(lambda event: self._snapshots.observe(event, self.state))
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

    def _spec(self, req: SubmitRequest) -> tuple[JobSpec, dict[str, str]]:
        """The validated spec, and its inputs as normalised path -> upload id. The checks
        run in a fixed order (who, what, where, how much, files, when), so a request with
        several problems is always refused for the same first one."""
        self._check_submitter(req)
        _check_command(req)
        queue = self._open_queue(req.queue or self.settings.default_queue)
        memory_mb = _memory_asked(req)
        _check_environment(req)
        inputs = self._inputs(req.inputs, req.uploads_of)
        outputs = _outputs(req.outputs)
        begin_time = None if req.begin is None else parse_begin(req.begin, self.clock())
        try:
            check_job_priority(self.settings.scheduler.priority, req.priority, req.privileged)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        dependency = parse_dependency(req.dependency)
        for term in dependency:
            self._check_dependency(term.job, req.may_view_owner)
        groups = [g for g, members in self.settings.scheduler.groups if req.user in members]
        applied = queue_rules.apply(queue, req.user, groups, req.slots, memory_mb, req.walltime_s)
        if req.reservation:
            check_target(self.state.reservations, req.reservation, req.user, groups)
        if not req.defer:
            self._check_feasible(req, queue, applied.memory_mb)
        asked_gres, asked_licenses = gres_rules.requested(
            req, queue, self.state.hosts.values(), dict(self.settings.licenses)
        )
        spec = JobSpec(
            user=req.user,
            queue=queue.name,
            name=req.name,
            command=req.command,
            script=req.script,
            slots=req.slots,
            memory_mb=applied.memory_mb,
            walltime_s=applied.walltime_s,
            env=tuple(sorted(req.env.items())),
            cwd=req.cwd,
            inputs=tuple(sorted(inputs)),
            outputs=outputs,
            dependency=dependency,
            hold=req.hold,
            submit_host=req.submit_host,
            resources=req.resources.strip(),
            stdout_file=req.stdout_file,
            stderr_file=req.stderr_file,
            gres=asked_gres,
            licenses=asked_licenses,
            reservation=req.reservation,
            begin_time=begin_time,
            priority=req.priority,
            exclusive=req.exclusive,
            mem_per_slot_mb=req.mem_per_slot_mb,
        )
        return spec, inputs

    def _check_submitter(self, req: SubmitRequest) -> None:
        """Text every field can hold, and a user jobs may run as."""
        _check_texts(req)
        if not USER_NAME.match(req.user or ""):
            raise InvalidRequest(f"user {req.user!r} is not a valid user name")
        check_job_user(self.settings, req.user)

    def _open_queue(self, name: str) -> QueueRecord:
        """The queue `name`, which must exist and accept new jobs."""
        queue = self.state.queues.get(name)
        if queue is None:
            raise InvalidRequest(f"queue {name!r} does not exist")
        if not queue.open:
            raise Conflict(f"queue {name!r} is closed: it accepts no new jobs")
        return queue

    def _check_feasible(self, req: SubmitRequest, queue: QueueRecord, memory_mb: int) -> None:
        """Refuse a job no host of its queue could ever run (xce/sched/feasibility.py)."""
        requirement = parse_requirement(req.resources) if req.resources.strip() else None
        why = multi_host_refusal(
            requirement,
            req.slots,
            memory_mb,
            req.exclusive,
            req.mem_per_slot_mb,
            queue,
            self.state.hosts.values(),
        )
        if why is None:
            return  # a multi-host job some set of hosts can hold
        if why == "":
            why = refusal(requirement, req.slots, memory_mb, queue, self.state.hosts.values())
        if why is not None:
            raise InvalidRequest(
                f"{why} (submit with defer to keep it for hosts that have not registered yet)"
            )

    def _check_dependency(self, job_id: str, may_view_owner: Callable[[str], bool] | None) -> None:
        """404 for a dependency on a job that does not exist or that the submitter may not
        view, in the same words: the dependency would reveal how that job ended."""
        number, index = parse_job_id(job_id)
        if index is None and number in self.state.arrays:
            owner: str | None = self.state.arrays[number].spec.user
        else:
            try:
                owner = self.state.job(job_id).spec.user
            except NotFound:
                owner = None
        if owner is None or (may_view_owner is not None and not may_view_owner(owner)):
            raise NotFound(
                f"dependency on job {job_id}, which does not exist or which you may not view"
            )

    def _inputs(self, raw: dict[str, str], uploads_of: str | None = None) -> dict[str, str]:
        """Normalised input path -> upload id; paths and uploads must not collide, and each
        upload must be `uploads_of`'s (None: anyone's)."""
        inputs: dict[str, str] = {}
        for path, upload_id in raw.items():
            rel = safe_relative_path(path, "input path")
            if rel in inputs:
                raise InvalidRequest(f"input path {rel!r} is given twice")
            inputs[rel] = upload_id
        ids = list(inputs.values())
        for upload_id in ids:
            self.files.check_upload(upload_id, uploads_of)
            if ids.count(upload_id) > 1:
                raise InvalidRequest(f"upload {upload_id} is used for more than one input")
        ordered = sorted(inputs)
        for parent, child in itertools.pairwise(ordered):
            if child.startswith(parent + "/"):
                raise InvalidRequest(
                    f"input {parent!r} cannot be a file and the directory of {child!r}"
                )
        return inputs

    async def submit(self, req: SubmitRequest) -> str:
        """Validate and enqueue a job or array; returns its id once durable."""
        return (await self.submit_keyed(req, ""))[0]

    async def submit_keyed(self, req: SubmitRequest, key: str) -> tuple[str, bool]:
        """`submit` with an Idempotency-Key: a repeat of a key this user sent within its
        lifetime returns the first submission's id (True: a repeat) once that is durable,
        across failovers too (the key is part of the replicated job record)."""
        if (found := await self._repeat(req, key)) is not None:
            return found, True
        spec, inputs = self._spec(req)
        event: ev.Event
        if self.numbers is not None:
            await self.numbers.ready()  # nothing awaits between this and the commit's apply
            if (found := await self._repeat(req, key)) is not None:
                return found, True  # a twin request got its number first
        if req.array is not None:
            parsed = parse_array_spec(req.array, self.settings.max_array_size)
            number = self.state.next_number
            event = ev.ArraySubmitted(
                self.clock(), number, spec, parsed.indices, parsed.max_concurrent, key
            )
        else:
            number = self.state.next_number
            event = ev.JobSubmitted(self.clock(), number, spec, key)
        self.files.attach_inputs(number, inputs)
        ticket = self.ship_files(  # the standbys move their copies of the uploads alike
            [(f"files/jobs/{number}/inputs", "drop")]
            + [
                (f"files/jobs/{number}/inputs/{rel}", f"move:files/uploads/{upload}")
                for rel, upload in sorted(inputs.items())
            ]
            + [(f"files/uploads/{upload}.json", "drop") for upload in inputs.values()]
            if inputs
            else []
        )
        await self.commit([event])
        await self.files_replicated(ticket)  # sync mode: the inputs are on a standby too
        metrics.labelled(metrics.SUBMISSIONS, "array" if req.array is not None else "job").inc()
        return str(number), False

    async def _repeat(self, req: SubmitRequest, key: str) -> str | None:
        """The id of the earlier submission with this key, once it is durable."""
        found = self._keyed(req, key) if key else None
        if found is not None:
            await self.log.sync()  # the first request's commit may still be under way
        return found

    def _keyed(self, req: SubmitRequest, key: str) -> str | None:
        """The id an earlier submission with this user's `key` got, if it is still alive
        (IDEMPOTENCY_TTL_S, and as long as the job is kept); Conflict if the key came with
        a different job."""
        found = self.state.submit_keys.get((req.user, key))
        if found is None:
            return None
        record = self.state.arrays.get(int(found)) or self.state.jobs.get(found)
        if record is None or self.clock() - record.submit_time > IDEMPOTENCY_TTL_S:
            return None
        spec = record.spec
        if (spec.command, spec.script, spec.name) != (req.command, req.script, req.name):
            raise Conflict(
                f"Idempotency-Key {key!r} was already used for job {found}, a different submission"
            )
        return found

    # --- job control --------------------------------------------------------------------

    def _job_events(self, job: JobRecord, action: str, now: float) -> list[ev.Event]:
        if action == "kill":
            if job.state.active:
                host = self.state.hosts.get(job.host or "")
                if host is None or host.status is HostStatus.UNAVAILABLE:
                    return [ev.JobKilled(now, job.id, "killed (host unavailable)")]
                if job.kill_requested and not job.requeue_requested:
                    return []
                return [ev.JobKillRequested(now, job.id)]
            lifecycle.check(job.id, "kill", job.state, JobState.EXIT)
            return [ev.JobKilled(now, job.id)]
        if action == "stop":
            lifecycle.check(job.id, "suspend", job.state)
            return [ev.JobSuspended(now, job.id)]
        if action == "resume":
            lifecycle.check(job.id, "resume", job.state)
            return [ev.JobResumed(now, job.id)]
        if action == "requeue":
            lifecycle.check(job.id, "requeue", job.state, JobState.PEND)
            until = self.fence_until(job.host) if job.host else None
            if until is not None:
                raise Conflict(
                    f"job {job.id} may still be running on host {job.host}, which is "
                    f"unreachable: it can be requeued from {_clock_text(until)} (heartbeat "
                    f"deadline + [controller] fence_timeout_s), when its worker has killed it"
                )
            if job.state.active:
                # Stays where it is until its worker reports the attempt ended (killed):
                # only then does it wait for a host again, so it never runs twice.
                if job.requeue_requested:
                    return []
                return [ev.JobKillRequested(now, job.id, requeue=True)]
            return [ev.JobRequeued(now, job.id)]
        raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")

    def _array_events(self, number: int, action: str, now: float) -> list[ev.Event]:
        array = self.state.array(number)
        out: list[ev.Event] = []
        tasks = self.state.tasks_of(number)
        if action == "kill":
            if array.pending:
                out.append(ev.ArrayCancelled(now, number))
            states = (JobState.PEND, JobState.PSUSP, JobState.RUN, JobState.USUSP, JobState.SSUSP)
        elif action == "stop":
            if array.pending and not array.held:
                out.append(ev.ArrayHeld(now, number))
            states = (JobState.PEND, JobState.RUN, JobState.SSUSP)
        elif action == "resume":
            if array.held:
                out.append(ev.ArrayReleased(now, number))
            states = (JobState.PSUSP, JobState.USUSP, JobState.SSUSP)
        elif action == "requeue":
            states = (JobState.RUN, JobState.USUSP, JobState.SSUSP, JobState.DONE, JobState.EXIT)
        else:
            raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")
        for task in tasks:
            if task.state in states:
                out.extend(self._job_events(task, action, now))
        if not out:
            raise Conflict(f"no task of job array {number} is in a state that allows {action}")
        return out

    async def control(self, job_id: str, action: str, owner: str | None = None) -> list[str]:
        """stop / resume / requeue / kill one job, one task, or a whole array.

        With `owner` set (a plain user), only that user's jobs may be touched.
        """
        if action not in JOB_ACTIONS:
            raise InvalidRequest(f"unknown job action {action!r} (use {', '.join(JOB_ACTIONS)})")
        number, index = parse_job_id(job_id)
        now = self.clock()
        if index is None and number in self.state.arrays:
            user = self.state.arrays[number].spec.user
            events = self._array_events(number, action, now) if owner in (None, user) else []
        else:
            job = self.state.job(job_id)
            user = job.spec.user
            events = self._job_events(job, action, now) if owner in (None, user) else []
        if owner is not None and owner != user:
            raise Forbidden(f"{owner} may not {action} job {job_id} of user {user}")
        await self.commit(events)
        return sorted({getattr(e, "job_id", str(getattr(e, "number", ""))) for e in events})

    async def modify_job(
        self,
        job_id: str,
        changes: dict[str, object],
        privileged: bool,
        may_view_owner: Callable[[str], bool] | None = None,
        defer: bool = False,
    ) -> list[ev.Event]:
        """`xce job modify`: validated and committed as events (xce/controller/modify.py);
        nothing awaits between the checks and the commit."""
        events = modify_events(self, job_id, dict(changes), privileged, may_view_owner, defer)
        await self.commit(events)
        return events

    # --- queues -------------------------------------------------------------------------

    def _check_queue(self, queue: QueueRecord) -> None:
        """A queue's settings hold together: known plugins, defaults within maximums, the
        queues it preempts exist."""
        unknown = [name for name in queue.preempt if name not in self.state.queues]
        if unknown:
            raise InvalidRequest(f"preempt: queue {unknown[0]!r} does not exist")
        try:
            policy_for(queue.plugins)
        except ValueError as exc:
            raise InvalidRequest(f"plugins: {exc}") from None
        problem = queue_rules.check_settings(queue)
        if problem:
            raise InvalidRequest(problem)

    async def create_queue(self, queue: QueueRecord) -> QueueRecord:
        if queue.name in self.state.queues:
            raise Conflict(f"queue {queue.name!r} already exists")
        self._check_queue(queue)
        await self.commit([ev.QueueCreated(self.clock(), queue)])
        return self.state.queues[queue.name]

    async def modify_queue(self, name: str, changes: dict[str, object]) -> QueueRecord:
        """New settings for a queue (`changes` of QueueRecord fields, validated by the API
        schema); its jobs keep what they were submitted with."""
        old = self.state.queue(name)
        unknown = (
            set(changes)
            - {f.name for f in dataclasses.fields(QueueRecord)}
            - {"name", "open", "active"}
        )
        fixed = set(changes) & {"name", "open", "active"}
        if unknown or fixed:
            raise InvalidRequest(
                f"cannot modify {', '.join(sorted(unknown | fixed))} of a "
                "queue (open/close and activate/deactivate have their own "
                "actions)"
            )
        new = dataclasses.replace(old, **changes)  # type: ignore[arg-type]
        self._check_queue(new)
        if new != old:
            await self.commit([ev.QueueModified(self.clock(), new)])
        return self.state.queues[name]

    async def delete_queue(self, name: str) -> None:
        """Delete a queue no live job is in; finished jobs keep its name."""
        self.state.queue(name)
        if name == self.settings.default_queue:
            raise Conflict(
                f"queue {name!r} is the default queue ([controller] "
                "default_queue): choose another default first"
            )
        await self.commit([ev.QueueDeleted(self.clock(), name)])

    async def queue_action(self, name: str, action: str) -> QueueRecord:
        queue = self.state.queue(name)
        now = self.clock()
        table = {
            "open": (queue.open, ev.QueueOpened),
            "close": (not queue.open, ev.QueueClosed),
            "activate": (queue.active, ev.QueueActivated),
            "deactivate": (not queue.active, ev.QueueDeactivated),
        }
        if action not in table:
            raise InvalidRequest(f"unknown queue action {action!r} (use {', '.join(table)})")
        already, event_type = table[action]
        if not already:
            await self.commit([event_type(now, name)])
        return self.state.queues[name]

    # --- hosts --------------------------------------------------------------------------

    async def host_action(self, name: str, action: str, reason: str = "") -> None:
        host = self.state.host(name)
        now = self.clock()
        if action == "open":
            events = [] if host.admin is HostAdmin.OPEN else [ev.HostOpened(now, name)]
        elif action == "close":
            events = [ev.HostClosed(now, name, reason or "closed by admin")]
        elif action == "drain":
            events = [ev.HostDrainStarted(now, name, reason or "drained by admin")]
        else:
            raise InvalidRequest(f"unknown host action {action!r} (use open, close, drain)")
        await self.commit(events)

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

    # --- scheduling ---------------------------------------------------------------------

    def _any_free_host(self) -> bool:
        for host in self.state.hosts.values():
            if host.status is not HostStatus.ONLINE:
                continue
            load = self.state.host_load.get(host.name)
            if load is None or load.slots < host.slots:
                return True
        return False

    async def schedule_once(self) -> int:
        """One scheduling pass: plan on a snapshot, then commit the placements."""
        if not self._any_free_host() and not any(q.preempt for q in self.state.queues.values()):
            # A full (or empty) cluster: no pass over the pending jobs at all; every pending
            # job reads the same reason.
            online = any(h.status is HostStatus.ONLINE for h in self.state.hosts.values())
            self.reasons = ReasonTexts(
                default="all online hosts are full" if online else "no online host"
            )
            self.stats["scheduling_passes"] += 1  # a pass all the same: reasons are current
            return 0
        started = time.perf_counter()
        now = self.clock()
        snapshot = self._snapshots.snapshot(self.state, self.usage.usage(now), self._groups)
        if self.settings.licenses:
            snapshot = dataclasses.replace(
                snapshot, licenses=free_licenses(self.state, dict(self.settings.licenses))
            )
        if self.settings.scheduler.priority != PrioritySettings():
            snapshot = dataclasses.replace(snapshot, priority=self.settings.scheduler.priority)
        resumed: list[str] = []
        if preemption.needed(snapshot):  # suspended victims go back first
            resumed, snapshot = preemption.resume_first(snapshot)
        result = self.planner(snapshot, now)
        self.reasons = ReasonTexts(result.reasons)
        now = self.clock()
        events: list[ev.Event] = [ev.JobResumed(now, job_id) for job_id in resumed]
        for placement in result.placements:
            events.append(
                ev.JobStarted(
                    now, placement.job_id, placement.host, placement.devices, placement.hosts
                )
            )
        if preemption.needed(snapshot):  # xce/sched/preemption.py: resume, then preempt
            decision = preemption.decide(snapshot, now, result)
            self.reasons.update(decision.reasons)
            events.extend(ev.JobResumed(now, job_id) for job_id in decision.resume)
            events.extend(ev.JobPreempted(now, p.victim, p.by, p.requeue) for p in decision.preempt)
        self.stats["scheduling_passes"] += 1
        self.stats["last_pass_ms"] = (time.perf_counter() - started) * 1000
        if events:
            await self.commit(events)
            self.stats["dispatched"] += len(events)
            metrics.DISPATCHED.inc(len(events))
        metrics.SCHEDULING_PASS.observe(time.perf_counter() - started)
        return len(events)
