"""Finish reports: queued when an attempt ends, saved beside it, delivered until taken.

Each report is retried on its own schedule, so one that keeps failing never holds up others;
outputs that could not be returned when the job ended are tried again in a task of their
own (the loop goes on delivering other reports meanwhile), at most `MAX_UPLOAD_TRIES`
times; what is never returned is named in the report's `output_problems`, so the job is
not reported as if its files were there. A report the controller took is kept a while in
case it loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from typing import Any

import msgspec

from xce.client import ApiError
from xce.client.http import job_path
from xce.protocol import worker as protocol
from xce.worker.agent.state import AgentState, Key
from xce.worker.attempt import fscreds, readers, recovery, spool, staging
from xce.worker.attempt.running import JobResult, RunningJob
from xce.worker.attempt.staging import OutputReturn

log = logging.getLogger("xce.worker")
# Passes of returning an attempt's outputs that reached a controller (the first when it
# ends, the rest from the report loop 1 s doubling to 60 s apart; each pass itself retries a
# broken transfer a few times): about ten minutes of a failing controller. After that the
# report goes without the outputs still missing, naming them in `output_problems`. While no
# controller answers at all, passes go on without counting: the report waits for one too.
MAX_UPLOAD_TRIES = 10
# Finished.output_problems: at most this many lines, each at most PROBLEM_CHARS.
MAX_PROBLEMS = 1000
PROBLEM_CHARS = 1024
# The worker's own keys of a queued report (never sent): outputs still to return, the names
# returned so far, and why the last pass could not return the rest.
_UPLOAD, _RETURNED, _UPLOAD_ERROR = "_upload", "_returned", "_upload_error"


def report_body(report: protocol.Finished) -> dict[str, Any]:
    """A finish report as it is queued, saved (report.json) and sent: the JSON form of the
    protocol's Struct, defaults left out. Keys starting with `_` are the worker's own
    (`_upload`: outputs still to return) and never go out."""
    body: dict[str, Any] = msgspec.to_builtins(report)
    return body


def with_problems(body: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """`body` with `output_problems` (bounded as the protocol bounds it), or without the
    key when there are none."""
    body = {k: v for k, v in body.items() if k != "output_problems"}
    unique = list(dict.fromkeys(p[:PROBLEM_CHARS] for p in problems))
    if len(unique) > MAX_PROBLEMS:
        more = len(unique) - MAX_PROBLEMS + 1
        unique = [*unique[: MAX_PROBLEMS - 1], f"... and {more} more problems with outputs"]
    if unique:
        body["output_problems"] = unique
    return body


def without_problems(body: dict[str, Any]) -> dict[str, Any]:
    """The report for a controller that does not know `output_problems` (an older one
    refuses unknown fields): the problems go into the reason instead, never lost."""
    problems = body.get("output_problems") or []
    reason = str(body.get("reason", ""))
    if problems:
        joined = "; ".join(problems)
        reason = f"{reason}; outputs not returned: {joined}" if reason else joined
    done = {k: v for k, v in body.items() if k != "output_problems"}
    done["reason"] = reason[:1000]
    return done


class FinishReports:
    """Queuing, saving and delivering the reports of ended attempts (pending in
    `state.pending` until taken, then kept a while in `state.delivered`)."""

    def __init__(self, state: AgentState) -> None:
        self.state = state
        self._saving: dict[Key, asyncio.Task[None]] = {}  # report files being written
        self._retry_at: dict[Key, float] = {}  # loop time of a failed report's next try
        self._tries: dict[Key, int] = {}
        # Output returns in progress (each its own task) and the passes each has had.
        self._uploading: dict[Key, asyncio.Task[None]] = {}
        self._upload_tries: dict[Key, int] = {}  # passes that reached a controller
        self._upload_passes: dict[Key, int] = {}  # all passes (the pause between them)
        self._wakeup = asyncio.Event()

    def resend(self, key: Key) -> None:
        """The controller lost a report it took: send it again."""
        self.state.pending[key] = self.state.delivered.pop(key)
        self._wakeup.set()

    async def report_loop(self) -> None:
        """Deliver finish reports until each is taken (accepted or known to be stale).

        Each report is retried on its own schedule (1 s doubling to 60 s): one that keeps
        failing never holds up the reports of other jobs behind it."""
        state = self.state
        loop = asyncio.get_running_loop()
        while True:
            due = [
                self._retry_at.get(key, 0.0) for key in state.pending if key not in self._uploading
            ]
            wait = max(0.0, min(due) - loop.time()) if due else None
            # Not wait_for: on Python 3.11 it swallows a cancellation that arrives as a
            # report wakes this loop, which would then outlive the agent's stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()
            self._wakeup.clear()
            for key, body in list(state.pending.items()):
                if key in self._uploading or self._retry_at.get(key, 0.0) > loop.time():
                    continue
                if _UPLOAD in body:
                    # In a task of its own: a long transfer holds up no other report.
                    self._uploading[key] = state.spawn(self._upload_pending(key, body))
                    continue
                try:
                    answer = await self._send_report(key, body)
                    if not answer.get("accepted"):
                        log.info("job %s attempt %s: report was stale, dropped", *key)
                except ApiError as exc:
                    if 400 <= exc.status < 500 and exc.status not in (404, 408, 429):
                        log.error("finish report for %s refused (%s): dropped", key[0], exc.message)
                    else:
                        tries = self._tries.get(key, 0) + 1
                        self._tries[key] = tries
                        delay = min(60.0, 2.0 ** (tries - 1))
                        self._retry_at[key] = loop.time() + delay
                        log.warning(
                            "finish report for %s failed: %s; retrying in %.0f s",
                            key[0],
                            exc.message,
                            delay,
                        )
                        continue
                self._retry_at.pop(key, None)
                self._tries.pop(key, None)
                self._taken(key, body)

    async def _send_report(self, key: Key, body: dict[str, Any]) -> Any:
        """POST the report (its public keys). A controller that refuses `output_problems`
        (one older than this worker) gets it again with the problems in the reason."""
        state = self.state
        path = f"{state.base}/jobs/{job_path(key[0])}/finished"
        public = {k: v for k, v in body.items() if not k.startswith("_")}
        try:
            return await state.client.request("POST", path, json=public)
        except ApiError as exc:
            if exc.status != 400 or "output_problems" not in exc.message:
                raise
            log.warning("the controller does not take output_problems: sent in the reason")
            return await state.client.request("POST", path, json=without_problems(public))

    async def _upload_pending(self, key: Key, body: dict[str, Any]) -> None:
        """One more pass at the outputs not returned yet, then the report is due again:
        with the outputs still missing (after a pause), or complete, or, after
        MAX_UPLOAD_TRIES passes, without them and naming each in `output_problems`."""
        state = self.state
        loop = asyncio.get_running_loop()
        returned = list(body.get(_RETURNED) or body.get("outputs") or [])
        outcome = OutputReturn()
        try:
            job = state.report_jobs.get(key)
            if job is None:
                outcome.problems.append("outputs: not returned: the attempt's files are gone")
            else:
                try:
                    if not job.readers:
                        job.readers = await fscreds.as_user(
                            job.creds, readers.open_readers, str(job.job_dir)
                        )
                    outcome = await staging.upload_outputs(
                        state.client, state.host, job, state.output_limits, done=returned
                    )
                except Exception as exc:  # the report goes out whatever the files do
                    log.warning("job %s: outputs cannot be returned: %s", key[0], exc)
                    outcome.problems.append(f"outputs: not returned: {exc}")
                finally:
                    readers.close_readers(job)
            # A pass that reached no controller does not count: the report waits for one
            # anyway, and outputs must not be given up because the controller was down.
            tries = self._upload_tries.get(key, 0) + (0 if outcome.unreachable else 1)
            returned += outcome.returned
            problems = [*body.get("output_problems", ()), *outcome.problems]
            done = {k: v for k, v in body.items() if k not in (_UPLOAD, _RETURNED, _UPLOAD_ERROR)}
            done["outputs"] = returned
            if outcome.pending and tries < MAX_UPLOAD_TRIES:
                done.update({_UPLOAD: True, _RETURNED: returned, _UPLOAD_ERROR: outcome.error})
                self._upload_tries[key] = tries
                passes = self._upload_passes.get(key, 0) + 1
                self._upload_passes[key] = passes
                delay = min(60.0, 2.0 ** (passes - 1))
                self._retry_at[key] = loop.time() + delay
                log.warning(
                    "job %s: %d outputs not returned yet (%s); trying again in %.0f s",
                    key[0],
                    len(outcome.pending),
                    outcome.error,
                    delay,
                )
            else:
                self._upload_tries.pop(key, None)
                self._upload_passes.pop(key, None)
                if outcome.pending:
                    log.error(
                        "job %s: reporting without %d outputs after %d tries: %s",
                        key[0],
                        len(outcome.pending),
                        tries,
                        outcome.error,
                    )
                    why = f"not returned after {tries} tries: {outcome.error}"
                    problems += [f"{name}: {why}" for name in outcome.pending]
            done = with_problems(done, problems)
            if key in state.pending:
                state.pending[key] = done
                if job is not None:
                    await asyncio.to_thread(self._save_report, key, job, done)
        finally:
            self._uploading.pop(key, None)
            self._wakeup.set()

    def _taken(self, key: Key, body: dict[str, Any]) -> None:
        """The controller has the report: forget it and the attempt's directory."""
        state = self.state
        state.pending.pop(key, None)
        state.delivered[key] = body
        while len(state.delivered) > 10_000:
            state.delivered.popitem(last=False)
        job = state.report_jobs.pop(key, None)
        if job is not None:
            state.spawn(self._clean(job))

    async def _clean(self, job: RunningJob) -> None:
        """Forget an attempt: its job directory (emptied as its user), then its state (off
        the event loop: a large tree must not hold up other jobs' starts and reports)."""
        saving = self._saving.pop(job.key, None)
        if saving is not None:
            await asyncio.wait([saving])  # its report file goes with the attempt's directory
        readers.close_readers(job)
        await spool.remove_job_dir(job.job_dir, job.creds)
        if job.attempt_dir is not None:
            await asyncio.to_thread(shutil.rmtree, job.attempt_dir, ignore_errors=True)

    def _save_report(self, key: Key, job: RunningJob, body: dict[str, Any]) -> None:
        try:
            recovery.save_report(job, body)
        except OSError as exc:
            log.warning("job %s: cannot save its result (%s)", key[0], exc)

    def queue(self, key: Key, body: dict[str, Any], job: RunningJob | None) -> None:
        """Queue an ended attempt's report (saved beside the attempt when there is one)."""
        state = self.state
        body = {**body, "reason": str(body.get("reason", ""))[:1000]}
        state.remember_ended(key)
        if job is not None:
            # Saved (fsynced) in a thread while the report goes out: the event loop keeps
            # starting and reporting other jobs meanwhile. Until it is on disk the keeper's
            # result.json stands for it (a restarted worker reports from that).
            saving = state.spawn(asyncio.to_thread(self._save_report, key, job, body))
            self._saving[key] = saving
            saving.add_done_callback(
                lambda done: self._saving.pop(key) if self._saving.get(key) is done else None
            )
            state.report_jobs[key] = job
        state.pending[key] = body
        self._wakeup.set()

    async def report_end(self, job: RunningJob, result: JobResult) -> None:
        """Return an ended attempt's outputs and queue its report."""
        state = self.state
        key = job.key
        state.remember_ended(key)
        if job.kill_reason == "taken away":
            # Requeued or reassigned: the controller no longer wants this attempt.
            await self._clean(job)
            return
        outcome = OutputReturn()
        try:
            await staging.copy_std_files(job)
            outcome = await staging.upload_outputs(
                state.client, state.host, job, state.output_limits
            )
        except Exception as exc:  # the attempt is reported whatever happened to its files
            log.warning("job %s: returning outputs failed: %s", key[0], exc)
            outcome.problems.append(f"outputs: not returned: {exc}")
        finally:
            readers.close_readers(job)
        meter = result.usage
        body = report_body(
            protocol.Finished(
                attempt=key[1],
                exit_code=result.exit_code,
                exit_signal=result.exit_signal,
                reason=result.reason,
                cpu_user_s=round(meter.cpu_user_s, 6),
                cpu_system_s=round(meter.cpu_system_s, 6),
                max_rss_bytes=meter.max_rss_bytes,
                wall_time_s=round(result.wall_time_s, 6),
                outputs=tuple(outcome.returned),
                host_failure=result.host_failure,
                **meter.gpus.report(),  # GPU utilisation and memory peak, where NVML read them
            )
        )
        body = with_problems(body, outcome.problems)
        if outcome.pending:
            log.warning(
                "job %s: %d outputs not returned yet (%s); will retry",
                key[0],
                len(outcome.pending),
                outcome.error,
            )
            body.update({_UPLOAD: True, _RETURNED: outcome.returned, _UPLOAD_ERROR: outcome.error})
        log.info(
            "job %s attempt %s ended: exit %s signal %s %s",
            key[0],
            key[1],
            result.exit_code,
            result.exit_signal,
            result.reason,
        )
        self.queue(key, body, job)
