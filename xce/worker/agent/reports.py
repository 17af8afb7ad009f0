"""Finish reports: queued when an attempt ends, saved beside it, delivered until taken.

Each report is retried on its own schedule, so one that keeps failing never holds up others;
outputs that could not be returned when the job ended go with a later try (or, refused too
often, without them). A report the controller took is kept a while in case it loses it.
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

log = logging.getLogger("xce.worker")
# A report whose outputs the controller refuses with server errors this many times in a
# row goes without them (unreachable controllers are waited for, however long).
MAX_UPLOAD_TRIES = 6


def report_body(report: protocol.Finished) -> dict[str, Any]:
    """A finish report as it is queued, saved (report.json) and sent: the JSON form of the
    protocol's Struct, defaults left out. Keys starting with `_` are the worker's own
    (`_upload`: outputs still to return) and never go out."""
    body: dict[str, Any] = msgspec.to_builtins(report)
    return body


class FinishReports:
    """Queuing, saving and delivering the reports of ended attempts (pending in
    `state.pending` until taken, then kept a while in `state.delivered`)."""

    def __init__(self, state: AgentState) -> None:
        self.state = state
        self._saving: dict[Key, asyncio.Task[None]] = {}  # report files being written
        self._retry_at: dict[Key, float] = {}  # loop time of a failed report's next try
        self._tries: dict[Key, int] = {}
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
            due = [self._retry_at.get(key, 0.0) for key in state.pending]
            wait = max(0.0, min(due) - loop.time()) if due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), wait)
            self._wakeup.clear()
            for key, body in list(state.pending.items()):
                if self._retry_at.get(key, 0.0) > loop.time():
                    continue
                try:
                    if "_upload" in body:
                        body = await self._upload_pending(key, body)
                    answer = await state.client.request(
                        "POST",
                        f"{state.base}/jobs/{job_path(key[0])}/finished",
                        json={k: v for k, v in body.items() if not k.startswith("_")},
                    )
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

    async def _upload_pending(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        """Return the outputs that could not be returned when the job ended."""
        state = self.state
        job = state.report_jobs.get(key)
        if job is None:
            return {k: v for k, v in body.items() if k != "_upload"}
        try:
            if not job.readers:
                job.readers = await fscreds.as_user(
                    job.creds, readers.open_readers, str(job.job_dir)
                )
            names = await staging.upload_outputs(state.client, state.host, job, state.output_limits)
        except ApiError as exc:
            if exc.status == 0 or self._tries.get(key, 0) < MAX_UPLOAD_TRIES:
                raise  # unreachable, or not yet given up: the report waits and retries
            log.error(
                "job %s: the controller keeps refusing its outputs (%s); reporting without them",
                key[0],
                exc.message,
            )
            names = []
        except OSError as exc:
            log.warning("job %s: outputs are gone (%s); reporting without them", key[0], exc)
            names = []
        finally:
            readers.close_readers(job)
        done = {k: v for k, v in body.items() if k != "_upload"}
        done["outputs"] = names
        state.pending[key] = done
        with contextlib.suppress(OSError):
            recovery.save_report(job, done)
        return done

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
        outputs: list[str] = []
        upload_later = False
        try:
            await staging.copy_std_files(job)
            outputs = await staging.upload_outputs(
                state.client, state.host, job, state.output_limits
            )
        except ApiError as exc:
            log.warning("job %s: returning outputs failed (%s); will retry", key[0], exc.message)
            upload_later = exc.status == 0 or exc.status >= 500
        except Exception as exc:  # the attempt is reported whatever happened to its files
            log.warning("job %s: returning outputs failed: %s", key[0], exc)
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
                outputs=tuple(outputs),
                host_failure=result.host_failure,
                **meter.gpus.report(),  # GPU utilisation and memory peak, where NVML read them
            )
        )
        if upload_later:
            body["_upload"] = True
        log.info(
            "job %s attempt %s ended: exit %s signal %s %s",
            key[0],
            key[1],
            result.exit_code,
            result.exit_signal,
            result.reason,
        )
        self.queue(key, body, job)
