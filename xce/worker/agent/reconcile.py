"""Reconciliation: the controller's answer is the whole desired job set of this host, and
the worker makes its processes match it (start, stop, resume, kill), then follows each
started attempt to its end. Attempts that already ended are remembered, so a repeated or late
answer never starts a job twice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from xce.client import ApiError
from xce.protocol import worker as protocol
from xce.worker.agent.hostinfo import host_resources
from xce.worker.agent.reports import FinishReports, report_body
from xce.worker.agent.state import AgentState, Key
from xce.worker.attempt import accounts, executor, jobcontrol, spool, staging, usage
from xce.worker.attempt.running import JobResult, LaunchError, RunningJob

if TYPE_CHECKING:
    from xce.worker.tasks.service import TaskService

log = logging.getLogger("xce.worker")
_E = TypeVar("_E", protocol.Assignment, protocol.Share)


class BadAnswer(Exception):
    """The controller's answer is not a desired set this worker can read: it is applied not
    at all (the worker asks again), never in part."""


@dataclass(frozen=True)
class Answer:
    """The controller's answer, decoded once: from here on the worker reads its assignments
    through `protocol.Assignment` and `protocol.Share`. An entry this worker cannot read but
    whose (job id, attempt) it can is kept apart (`unreadable_*`, the key and the problem):
    what runs under that key is left alone, never taken for "no longer assigned"."""

    version: int | None
    jobs: list[protocol.Assignment]
    shares: list[protocol.Share]
    unreadable_jobs: dict[Key, str] = field(default_factory=dict)
    unreadable_shares: dict[Key, str] = field(default_factory=dict)


def decode_answer(answer: Any) -> Answer:
    """The controller's answer (already parsed JSON), entry by entry. `BadAnswer` when the
    answer as a whole, or the key of one of its entries, cannot be read: then nothing of it
    may be applied, since a running attempt could be the one that entry names."""
    if not isinstance(answer, dict):
        raise BadAnswer(f"the controller sent an answer this worker cannot read: {answer!r:.80}")
    try:
        version = msgspec.convert(answer.get("version"), int | None)
    except msgspec.ValidationError as exc:
        raise BadAnswer(f"the controller sent a version this worker cannot read: {exc}") from None
    jobs, bad_jobs = _entries(answer.get("jobs", []), protocol.Assignment, "jobs")
    shares, bad_shares = _entries(answer.get("shares", []), protocol.Share, "shares")
    return Answer(version, jobs, shares, bad_jobs, bad_shares)


def _entries(raw: Any, kind: type[_E], where: str) -> tuple[list[_E], dict[Key, str]]:
    if not isinstance(raw, list):
        raise BadAnswer(f"the controller sent {where} this worker cannot read: not a list")
    good: list[_E] = []
    bad: dict[Key, str] = {}
    for i, entry in enumerate(raw):
        try:
            good.append(msgspec.convert(entry, kind))
            continue
        except msgspec.ValidationError as exc:
            problem = f"{where}[{i}]: {exc}"
        key = _key_of(entry)
        if key is None:
            raise BadAnswer(f"the controller sent assignments this worker cannot read: {problem}")
        log.error("job %s attempt %s: the controller sent %s", key[0], key[1], problem)
        bad[key] = problem
    return good, bad


def _key_of(entry: Any) -> Key | None:
    """(job id, attempt) of an entry that does not decode, if those two can be read."""
    if not isinstance(entry, dict):
        return None
    job_id, attempt = entry.get("job_id"), entry.get("attempt")
    if isinstance(job_id, str) and type(attempt) is int:
        return job_id, attempt
    return None


class Reconciler:
    """Matching this host's processes to the controller's desired set."""

    def __init__(self, state: AgentState, reports: FinishReports, tasks: TaskService) -> None:
        self.state = state
        self.reports = reports
        self.tasks = tasks  # follows the shares of multi-host jobs held here
        self._lock = asyncio.Lock()
        # the latest assignment of each attempt that came while it was starting
        self._while_starting: dict[Key, protocol.Assignment] = {}

    async def reconcile(self, answer: Any) -> None:
        """Apply the controller's answer; `BadAnswer` (nothing applied) if it cannot be read.
        An attempt whose entry cannot be read keeps running as it is; one not started yet
        ends, with the reason, as a job that could not start."""
        decoded = decode_answer(answer)
        state = self.state
        async with self._lock:
            if decoded.version is not None:
                state.version = decoded.version
            desired = {(a.job_id, a.attempt): a for a in decoded.jobs}
            for key, a in desired.items():
                job = state.running.get(key)
                if job is None:
                    if key in state.delivered and key not in state.pending:
                        log.info(
                            "job %s attempt %s: the controller lost its report; resending", *key
                        )
                        self.reports.resend(key)
                        continue
                    if key in state.starting:
                        # its directory is being made: the latest answer applies once it is
                        # (a stop, a kill or a new walltime would otherwise be lost)
                        self._while_starting[key] = a
                        continue
                    if key in state.ended or key in state.pending:
                        continue
                    if a.action == "kill":
                        self.finish_unstarted(a, "killed before it started")
                        continue
                    state.starting.add(key)
                    state.spawn(self._run(a))
                    continue
                # `xce job modify` may change a running job's walltime: the next check uses it
                job.assignment = msgspec.structs.replace(
                    job.assignment, action=a.action, walltime_s=a.walltime_s
                )
                self._apply_action(job, a.action)
            for key, problem in decoded.unreadable_jobs.items():
                if key in state.running or key in state.starting:
                    log.error("job %s attempt %s: left as it is (its entry is unreadable)", *key)
                elif not (key in state.ended or key in state.pending or key in state.delivered):
                    reason = f"failed to start: the worker cannot read its assignment ({problem})"
                    finished = protocol.Finished(
                        attempt=key[1], exit_code=None, reason=reason[:900]
                    )
                    self.reports.queue(key, report_body(finished), None)
            # a share whose entry cannot be read keeps its cgroup (and its running tasks), but
            # the task service no longer starts new tasks into it
            await asyncio.to_thread(
                state.shares.reconcile, decoded.shares, decoded.unreadable_shares.keys()
            )
            self.tasks.follow_shares(decoded.shares)
            for key, job in list(state.running.items()):
                if key not in desired and key not in decoded.unreadable_jobs:
                    log.info("job %s attempt %s is no longer assigned here: killing", *key)
                    state.spawn(jobcontrol.kill(job, "taken away", state.settings.kill_grace_s))

    def _apply_action(self, job: RunningJob, action: str) -> None:
        state = self.state
        if job.keeper is None:
            if action == "kill" and job.staging is not None:  # ends its inputs' fetch now
                state.spawn(jobcontrol.kill(job, "killed", state.settings.kill_grace_s))
            return  # not started yet: _run applies the latest action once it is
        if action == "stop":
            state.spawn(jobcontrol.suspend(job))
        elif action == "run":
            state.spawn(jobcontrol.resume(job))
        elif action == "kill":
            state.spawn(jobcontrol.kill(job, "killed", state.settings.kill_grace_s))

    def finish_unstarted(
        self, a: protocol.Assignment, reason: str, job: RunningJob | None = None
    ) -> None:
        key = (a.job_id, a.attempt)
        report = protocol.Finished(attempt=a.attempt, exit_code=None, reason=reason)
        self.reports.queue(key, report_body(report), job)

    async def _run(self, a: protocol.Assignment) -> None:
        state = self.state
        key: Key = (a.job_id, a.attempt)
        if state.launch_bin and a.launch is not None:
            a = msgspec.structs.replace(
                a, launch=msgspec.structs.replace(a.launch, bin=state.launch_bin)
            )
        try:
            account = accounts.account_for(
                a.user, state.settings.allow_root_jobs, state.settings.min_job_uid
            )
            job = await spool.prepare(state.spool, a, account)
        except (LaunchError, OSError) as exc:
            log.warning("job %s cannot start: %s", key[0], exc)
            state.starting.discard(key)
            self._while_starting.pop(key, None)
            self.finish_unstarted(a, str(exc))
            return
        later = self._while_starting.pop(key, None)
        if later is not None:  # applied with the rest once it has started (`_apply_action`)
            job.assignment = msgspec.structs.replace(
                job.assignment, action=later.action, walltime_s=later.walltime_s
            )
        state.running[key] = job
        state.starting.discard(key)
        loop = asyncio.get_running_loop()
        job.result = loop.create_future()
        try:
            try:
                await self._fetch_inputs(job)
                if key not in state.running or job.killing:
                    raise LaunchError(job.kill_reason or "taken away before it started")
                context = executor.LaunchContext(
                    launcher=state.launcher,
                    backend=state.backend,
                    account=account,
                    host=state.host,
                    pids_limit=state.settings.pids_limit,
                    worker_state=state.spool.state,
                    contact=state.contact,
                    host_memory_mb=host_resources(state.settings)[1],
                    private_tmp=state.settings.private_tmp,
                    devices=state.devices,
                )
                await executor.launch(job, context)
            except (LaunchError, ApiError, OSError, ValueError) as exc:
                # never an empty reason: a bare TimeoutError or OSError says nothing by str()
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                message = message or type(exc).__name__
                log.warning("job %s failed to start: %s", key[0], message)
                state.running.pop(key, None)
                job.result.set_result(JobResult(None, None, message, usage.UsageMeter(), 0))
                self.finish_unstarted(a, f"failed to start: {message}", job)
                return
            log.info("job %s attempt %s started as pid %s", key[0], key[1], job.pid)
            try:
                # An action that arrived while inputs were fetched applies now.
                self._apply_action(job, job.assignment.action)
            finally:
                await self.follow(job)  # a started attempt is always followed to its end
        finally:
            state.running.pop(key, None)
            if not job.result.done():
                failed = JobResult(None, None, "worker error", usage.UsageMeter(), 0)
                job.result.set_result(failed)

    async def _fetch_inputs(self, job: RunningJob) -> None:
        """The job's inputs, in a task a kill may cancel (`jobcontrol.kill`): a killed
        job's start then fails at once with the kill's reason, whatever is in transit."""
        state = self.state
        job.staging = asyncio.ensure_future(
            staging.fetch_inputs(state.client, state.host, job, state.inputs)
        )
        try:
            await job.staging
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not job.killing or (current is not None and current.cancelling()):
                raise  # the worker itself is stopping
            raise LaunchError(job.kill_reason or "killed while its inputs were fetched") from None
        finally:
            job.staging = None

    async def follow(self, job: RunningJob) -> None:
        """Wait for a started (or adopted) attempt to end, then report it."""
        assert job.result is not None
        settings = self.state.settings
        try:
            result = await executor.wait(job, settings.usage_interval_s, settings.kill_grace_s)
        except Exception as exc:  # never lose track of a started job: end it, say why
            log.exception("job %s: waiting for it failed; killing it", job.key[0])
            await asyncio.to_thread(jobcontrol.kill_group_now, job)
            result = JobResult(None, None, f"worker error: {exc}", job.meter, job.wall_seconds())
        if not job.result.done():
            job.result.set_result(result)
        self.state.running.pop(job.key, None)
        await self.reports.report_end(job, result)
