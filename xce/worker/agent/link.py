"""Talking to the controller: registration, the assignment long-poll and heartbeats.

Every contact the controller takes restarts the keepers' fence (xce/worker/keeper/fence.py) from
when it was sent; heartbeats carry running jobs' usage and output, and the usage of the
parts of multi-host jobs held here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import msgspec
import psutil

from xce.client import ApiError
from xce.protocol import worker as protocol
from xce.worker.agent import tail
from xce.worker.agent.hostinfo import containment, host_resources
from xce.worker.agent.reconcile import Reconciler
from xce.worker.attempt import staging
from xce.worker.keeper import fence

log = logging.getLogger("xce.worker")
# How long a task that ended in a share waits for its figures to reach the controller.
SHARE_REPORT_WAIT_S = 5.0


class ControllerLink(Reconciler):
    """Registration, polling and heartbeats."""

    async def register(self) -> None:
        slots, memory = host_resources(self.settings)
        body = protocol.Register(
            host=self.host,
            slots=slots,
            memory_mb=memory,
            # detected GPU attributes first: the configured ones win
            attributes={**self.devices.attributes, **dict(self.settings.attributes)},
            containment=containment(self.backend),
            gres={kind: tuple(ids) for kind, ids in self.devices.devices.items()},
            task_address=self.tasks.address or None,
        )
        delay = 0.2
        while True:
            try:
                sent = fence.now()
                answer = await self._post("/api/v1/workers/register", body)
                self._contacted(sent, answer)
                break
            except ApiError as exc:
                if exc.status == 400 and "containment" in exc.message and body.containment:
                    # An older controller: register without saying how jobs are contained.
                    body = msgspec.structs.replace(body, containment={})
                    continue
                if exc.status != 0 and exc.status < 500:
                    raise
                log.info("controller not reachable yet (%s); retrying", exc.message)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        log.info("registered as %s (%d slots, %d MB)", self.host, slots, memory)
        self.registered.set()
        await self.reconcile(answer)

    async def poll_loop(self) -> None:
        while True:
            try:
                answer = await self.client.request(
                    "GET",
                    f"{self._base}/assignments",
                    params={"version": str(self.version), "timeout": "20"},
                    timeout=30,
                )
                await self.reconcile(answer)
            except ApiError as exc:
                await self._on_error(exc)

    async def heartbeat_loop(self) -> None:
        """A heartbeat every interval; sooner (every `tail.PUSH_S`) while job output grows."""
        loop = asyncio.get_running_loop()
        interval = self.settings.heartbeat_interval_s
        next_beat = loop.time() + interval
        while True:
            now = loop.time()
            await asyncio.sleep(max(0.0, min(next_beat, now + tail.PUSH_S) - now))
            chunks = self.output.collect(list(self.running.values()))
            if not chunks and loop.time() < next_beat:
                continue
            await self._heartbeat(chunks)
            next_beat = loop.time() + interval

    async def _heartbeat(self, chunks: list[tail.Chunk]) -> None:
        output = self.output.report(chunks)
        running = [
            protocol.RunningJob(
                job_id=job.key[0],
                attempt=job.key[1],
                cpu_user_s=job.meter.cpu_user_s,
                cpu_system_s=job.meter.cpu_system_s,
                max_rss_bytes=job.meter.max_rss_bytes,
                wall_time_s=job.wall_seconds(),
                output=_output(output.get(job.key)),
            )
            for job in self.running.values()
            if job.meter is not None
        ]
        load1, load5, load15 = os.getloadavg()
        mem = psutil.virtual_memory()
        free_mb = mem.available // (1024 * 1024)
        shares = []
        if self.shares.held:  # multi-host jobs' parts here: their usage, OOM kills (issue 15)
            shares = [
                protocol.ShareItem(**r) for r in await asyncio.to_thread(self.shares.readings)
            ]
        body = protocol.Heartbeat(
            running=tuple(running),
            load={"load1": load1, "load5": load5, "load15": load15, "mem_free_mb": free_mb},
            shares=tuple(shares),
        )
        try:
            sent = fence.now()
            answer = await self._post(f"{self._base}/heartbeat", body, timeout=10)
            self._contacted(sent, answer)
            self.output.taken(chunks)
            if (
                isinstance(answer, dict)
                and answer.get("register_again")
                and self.registered.is_set()
            ):
                # A controller that restarted or took over has not heard how we contain jobs.
                self.registered.clear()
                self._spawn(self.register())
        except ApiError as exc:
            if output and exc.status in (400, 413):
                # Never lose a heartbeat over its output: send it again without.
                self.output.refused(exc.status, exc.message)
                await self._heartbeat([])
                return
            await self._on_error(exc)

    async def report_shares_now(self) -> None:
        """A heartbeat at once, without output, so the controller has a share's figures
        before the task that just ended there is reported to its caller (xce/worker/
        tasks.py): the job's final usage then counts it (issue 15)."""
        try:
            await asyncio.wait_for(self._heartbeat([]), SHARE_REPORT_WAIT_S)
        except TimeoutError:
            log.warning(
                "the controller did not take a share's usage within %s s", SHARE_REPORT_WAIT_S
            )

    def _contacted(self, sent: float, answer: Any) -> None:
        """A controller took our registration or heartbeat sent at `sent`: the keepers'
        fence starts again from then (never from the answer's arrival, which is later than
        the controller's own record of the contact)."""
        timeout = self.contact.fence_timeout_s
        if isinstance(answer, dict) and isinstance(answer.get("fence_timeout_s"), int | float):
            timeout = float(answer["fence_timeout_s"])
        self.contact = fence.Contact(max(sent, self.contact.at), timeout)
        self.output_limits = staging.OutputLimits.of(answer) or self.output_limits
        try:
            fence.record(str(self.spool.state), self.contact)
        except OSError as exc:
            log.error("cannot record the controller contact (%s): jobs will be fenced", exc)

    async def _on_error(self, exc: ApiError) -> None:
        if exc.status == 404:
            log.warning("controller does not know this host (%s): registering again", exc.message)
            self.registered.clear()
            await self.register()
            return
        log.warning("controller request failed: %s", exc.message)
        await asyncio.sleep(1.0)


def _output(streams: dict[str, Any] | None) -> protocol.Output | None:
    """A running job's new output (xce/worker/agent/tail.py) as the heartbeat declares it."""
    if not streams:
        return None
    return protocol.Output(**{name: protocol.OutputChunk(**c) for name, c in streams.items()})
