"""Reconciliation: the controller's answer is the whole desired job set of this host, and
the worker makes its processes match it (start, stop, resume, kill), then follows each
started attempt to its end. Attempts that already ended are remembered, so a repeated or late
answer never starts a job twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from xce.client import ApiError
from xce.protocol import worker as protocol
from xce.worker.agent.hostinfo import host_resources
from xce.worker.agent.reports import Reporting, report_body
from xce.worker.agent.state import Key
from xce.worker.attempt import accounts, executor, jobcontrol, spool, staging, usage
from xce.worker.attempt.running import JobResult, LaunchError, RunningJob

log = logging.getLogger("xce.worker")


class Reconciler(Reporting):
    """Matching this host's processes to the controller's desired set."""

    async def reconcile(self, answer: dict[str, Any]) -> None:
        async with self._lock:
            self.version = answer.get("version", self.version)
            desired = {(a["job_id"], a["attempt"]): a for a in answer.get("jobs", [])}
            for key, a in desired.items():
                job = self.running.get(key)
                if job is None:
                    if key in self.delivered and key not in self.reports:
                        log.info(
                            "job %s attempt %s: the controller lost its report; resending", *key
                        )
                        self.reports[key] = self.delivered.pop(key)
                        self._report_wakeup.set()
                        continue
                    if key in self.ended or key in self.reports or key in self.starting:
                        continue
                    if a["action"] == "kill":
                        self._finish_unstarted(a, "killed before it started")
                        continue
                    self.starting.add(key)
                    self._spawn(self._run(a))
                    continue
                # `xce job modify` may change a running job's walltime: the next check uses it
                job.assignment = {
                    **job.assignment,
                    "action": a["action"],
                    "walltime_s": a.get("walltime_s"),
                }
                self._apply_action(job, a["action"])
            await asyncio.to_thread(self.shares.reconcile, answer.get("shares") or [])
            self.tasks.follow_shares(answer.get("shares") or [])
            for key, job in list(self.running.items()):
                if key not in desired:
                    log.info("job %s attempt %s is no longer assigned here: killing", *key)
                    self._spawn(jobcontrol.kill(job, "taken away", self.settings.kill_grace_s))

    def _apply_action(self, job: RunningJob, action: str) -> None:
        if job.keeper is None:
            return  # not started yet: _run applies the latest action once it is
        if action == "stop":
            self._spawn(jobcontrol.suspend(job))
        elif action == "run":
            self._spawn(jobcontrol.resume(job))
        elif action == "kill":
            self._spawn(jobcontrol.kill(job, "killed", self.settings.kill_grace_s))

    def _finish_unstarted(
        self, a: dict[str, Any], reason: str, job: RunningJob | None = None
    ) -> None:
        key = (a["job_id"], a["attempt"])
        report = protocol.Finished(attempt=a["attempt"], exit_code=None, reason=reason)
        self._queue_report(key, report_body(report), job)

    async def _run(self, a: dict[str, Any]) -> None:
        key: Key = (a["job_id"], a["attempt"])
        if self.launch_bin and isinstance(a.get("launch"), dict):
            a = {**a, "launch": {**a["launch"], "bin": self.launch_bin}}
        try:
            account = accounts.account_for(
                a["user"], self.settings.allow_root_jobs, self.settings.min_job_uid
            )
            job = await spool.prepare(self.spool, a, account)
        except (LaunchError, OSError) as exc:
            log.warning("job %s cannot start: %s", key[0], exc)
            self.starting.discard(key)
            self._finish_unstarted(a, str(exc))
            return
        self.running[key] = job
        self.starting.discard(key)
        loop = asyncio.get_running_loop()
        job.result = loop.create_future()
        try:
            try:
                await staging.fetch_inputs(self.client, self.host, job)
                if key not in self.running or job.killing:
                    raise LaunchError(job.kill_reason or "taken away before it started")
                await executor.launch(
                    job,
                    self.launcher,
                    self.backend,
                    account,
                    self.host,
                    self.settings.pids_limit,
                    self.spool.state,
                    self.contact,
                    host_resources(self.settings)[1],
                    self.settings.private_tmp,
                    self.devices,
                )
            except (LaunchError, ApiError, OSError, ValueError) as exc:
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                log.warning("job %s failed to start: %s", key[0], message)
                self.running.pop(key, None)
                job.result.set_result(JobResult(None, None, message, usage.UsageMeter(), 0))
                self._finish_unstarted(a, f"failed to start: {message}", job)
                return
            log.info("job %s attempt %s started as pid %s", key[0], key[1], job.pid)
            try:
                # An action that arrived while inputs were fetched applies now.
                self._apply_action(job, job.assignment.get("action", "run"))
            finally:
                await self._follow(job)  # a started attempt is always followed to its end
        finally:
            self.running.pop(key, None)
            if not job.result.done():
                failed = JobResult(None, None, "worker error", usage.UsageMeter(), 0)
                job.result.set_result(failed)

    async def _follow(self, job: RunningJob) -> None:
        """Wait for a started (or adopted) attempt to end, then report it."""
        assert job.result is not None
        try:
            result = await executor.wait(
                job, self.settings.usage_interval_s, self.settings.kill_grace_s
            )
        except Exception as exc:  # never lose track of a started job: end it, say why
            log.exception("job %s: waiting for it failed; killing it", job.key[0])
            await asyncio.to_thread(jobcontrol.kill_group_now, job)
            result = JobResult(None, None, f"worker error: {exc}", job.meter, job.wall_seconds())
        if not job.result.done():
            job.result.set_result(result)
        self.running.pop(job.key, None)
        await self._report(job, result)
