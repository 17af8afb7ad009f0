"""Talking to the controller: registration, the assignment long-poll and heartbeats.

Every contact the controller takes restarts the keepers' fence (xce/worker/keeper/fence.py) from
when it was sent; heartbeats carry running jobs' usage and output, and the usage of the
parts of multi-host jobs held here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import TYPE_CHECKING, Any

import msgspec
import psutil

from xce.client import ApiError, XceClient
from xce.core.versions import RELEASE, WORKER_PROTOCOL, VersionSkew
from xce.protocol import worker as protocol
from xce.protocol.relay_keys import proven
from xce.worker.agent import tail
from xce.worker.agent.hostinfo import containment, host_resources
from xce.worker.agent.reconcile import BadAnswer, Reconciler
from xce.worker.agent.relay import RELAY_FORWARD_TIMEOUT_S
from xce.worker.agent.state import AgentState
from xce.worker.attempt import staging
from xce.worker.keeper import fence

if TYPE_CHECKING:
    from xce.worker.tasks.service import TaskService

log = logging.getLogger("xce.worker")
# How long a task that ended in a share waits for its figures to reach the controller.
SHARE_REPORT_WAIT_S = 5.0
# A worker the controller refuses for its versions asks again after 1 s, then ever less
# often, up to this (an upgrade of either side lets it in on the next try).
REFUSED_RETRY_MAX_S = 60.0
# Heartbeats go out up to this fraction of the interval early, at random (see
# `heartbeat_interval`).
HEARTBEAT_JITTER = 0.15
# The fewest heartbeats a longer interval the controller asks for must leave within the
# keepers' fence timeout (the controller's own ceiling, fence / (missed + 1), is 4 at the
# default 3 missed heartbeats).
FENCE_BEATS = 4
_VERSION_FIELDS = ("release", "protocol")
# After a heartbeat relay fails, heartbeats go straight to the controller this long before
# the relay is tried again.
RELAY_RETRY_S = 60.0
# How long requests straight to the controller (the assignment poll, a registration, a
# direct heartbeat) may keep failing while a relay still carries the heartbeats, before the
# heartbeats too go straight there: a host the controller's answers cannot reach gets no
# work, and it must look down to the controller (which then runs its jobs elsewhere) rather
# than kept online by its relay. Longer than a failover takes.
DIRECT_LOST_S = 30.0
# How long the controller may hold an assignment poll with nothing to say (it holds one at
# most 60 s). Each poll that ends this way is a request and an answer for nothing: at 20 s,
# 10,000 hosts made 500 a second, as many as the jobs they ran. A poll held by a controller
# that went away without closing the connection is found by the heartbeats instead
# (`_check_poll`), so the wait need not be short for that.
POLL_WAIT_S = 55


def _fields_unknown_there(exc: ApiError, body: protocol.Register) -> protocol.Register | None:
    """`body` without its version fields when an older controller refused one of them as
    unknown (it answers `body.release is not a known field`); None otherwise."""
    if exc.status != 400 or "not a known field" not in exc.message:
        return None
    if not any(f"body.{name} " in exc.message for name in _VERSION_FIELDS):
        return None
    if (body.release, body.protocol) == ("", 1):
        return None
    return msgspec.structs.replace(body, release="", protocol=1)


class ControllerLink:
    """Registration, polling and heartbeats; each answer goes to the reconciler."""

    def __init__(self, state: AgentState, reconciler: Reconciler, tasks: TaskService) -> None:
        self.state = state
        self.reconciler = reconciler
        self.tasks = tasks  # its address goes with the registration
        # loop time until which heartbeats skip a relay that failed
        self._relay_off_until = 0.0
        # loop time of the first request straight to the controller that failed since the
        # last one answered (None: the last one was answered)
        self._direct_failing_since: float | None = None
        # assignment answers applied so far (registrations' and polls'), and their count
        # when a heartbeat answer last said the controller had news the poll had not
        # brought (None: it had none)
        self._answers = 0
        self._news_at: int | None = None
        self._poll_stuck = asyncio.Event()

    async def register(self) -> None:
        state = self.state
        slots, memory = host_resources(state.settings)
        body = protocol.Register(
            host=state.host,
            slots=slots,
            memory_mb=memory,
            # detected GPU attributes first: the configured ones win
            attributes={**state.devices.attributes, **dict(state.settings.attributes)},
            containment=containment(state.backend),
            gres={kind: tuple(ids) for kind, ids in state.devices.devices.items()},
            task_address=self.tasks.address or None,
            release=RELEASE,
            protocol=WORKER_PROTOCOL,
        )
        delay = 0.2
        refused, refused_delay = "", 1.0
        while True:
            try:
                sent = fence.now()
                answer = await state.post("/api/v1/workers/register", body)
                self._contacted(sent, answer)
                self._direct_answered()
                state.relay_signer.take(answer)
                break
            except ApiError as exc:
                if exc.status == 400 and "containment" in exc.message and body.containment:
                    # An older controller: register without saying how jobs are contained.
                    body = msgspec.structs.replace(body, containment={})
                    continue
                older = _fields_unknown_there(exc, body)
                if older is not None:
                    # A controller from before versions were sent: register as protocol 1.
                    body = older
                    continue
                if exc.code == VersionSkew.code:
                    # Refused for its versions: not a reason to exit (and be restarted in a
                    # loop). Said once; an upgrade on either side lets it in on a retry.
                    if exc.message != refused:
                        log.error("the controller refuses this worker: %s", exc.message)
                        refused = exc.message
                    await asyncio.sleep(refused_delay)
                    refused_delay = min(refused_delay * 2, REFUSED_RETRY_MAX_S)
                    continue
                if exc.status != 0 and exc.status < 500:
                    raise
                log.info("controller not reachable yet (%s); retrying", exc.message)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        log.info("registered as %s (%d slots, %d MB)", state.host, slots, memory)
        state.registered.set()
        self._answers += 1
        try:
            await self.reconciler.reconcile(answer)
        except BadAnswer as exc:  # the poll asks again (its version is still the old one)
            log.error("%s", exc)

    async def poll_loop(self) -> None:
        while True:
            try:
                answer = await self._poll()
                if answer is None:
                    continue  # given up as stuck: ask again at once
                self._direct_answered()
                self._answers += 1
                await self.reconciler.reconcile(answer)
            except ApiError as exc:
                self._direct_failed(exc)
                await self._on_error(exc)
            except BadAnswer as exc:  # nothing of it applied: ask again, in a while
                log.error("%s", exc)
                await asyncio.sleep(1.0)

    async def _poll(self) -> Any:
        """One long poll's answer, or None when the heartbeats found it stuck first."""
        self._poll_stuck.clear()
        request = asyncio.ensure_future(
            self.state.client.request(
                "GET",
                f"{self.state.base}/assignments",
                params={"version": str(self.state.version), "timeout": str(POLL_WAIT_S)},
                timeout=POLL_WAIT_S + 10,
            )
        )
        stuck = asyncio.ensure_future(self._poll_stuck.wait())
        try:
            await asyncio.wait((request, stuck), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stuck.cancel()
            if not request.done():
                request.cancel()  # stuck, or this loop is stopping
                await asyncio.wait((request,))  # its connection closed before the next
        if request.cancelled():
            return None
        return request.result()

    def _check_poll(self, answer: Any) -> None:
        """After a heartbeat: the controller's version of this host differs from the last
        one an answer brought, and did at the heartbeat before too, with no answer between
        (a whole interval): the poll waits on a connection no controller answers (one that
        went away without closing it, a failover) and is asked again. A poll answer on its
        way when one heartbeat sees the news is not taken for stuck."""
        version = answer.get("version") if isinstance(answer, dict) else None
        if type(version) is not int or version == self.state.version:
            self._news_at = None
        elif self._news_at != self._answers:
            self._news_at = self._answers
        else:
            log.warning(
                "the assignment poll brought nothing for a heartbeat interval: asking again"
            )
            self._news_at = None
            self._poll_stuck.set()

    async def heartbeat_loop(self) -> None:
        """A heartbeat every interval; sooner (every `tail.PUSH_S`) while job output grows.

        The interval is this worker's own or the longer one the controller asks for
        (`heartbeat_interval`), less a random part of up to `HEARTBEAT_JITTER`: never
        later than asked, and the workers of a cluster that started (or found a new
        controller) together drift apart instead of arriving in one burst each interval."""
        loop = asyncio.get_running_loop()
        state = self.state
        next_beat = loop.time() + heartbeat_interval(state)
        while True:
            now = loop.time()
            await asyncio.sleep(max(0.0, min(next_beat, now + tail.PUSH_S) - now))
            chunks = state.output.collect(list(state.running.values()))
            if not chunks and loop.time() < next_beat:
                continue
            answered = await self._heartbeat(chunks)
            next_beat = loop.time() + heartbeat_interval(state, answered)

    async def _heartbeat(self, chunks: list[tail.Chunk], direct: bool = False) -> bool:
        """Send one heartbeat (`direct`: never through a relay); whether the controller
        took it."""
        state = self.state
        output = state.output.report(chunks)
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
            for job in state.running.values()
            if job.meter is not None
        ]
        load1, load5, load15 = os.getloadavg()
        mem = psutil.virtual_memory()
        free_mb = mem.available // (1024 * 1024)
        shares = []
        if state.shares.held:  # multi-host jobs' parts here: their usage, OOM kills
            shares = [
                protocol.ShareItem(**r) for r in await asyncio.to_thread(state.shares.readings)
            ]
        body = protocol.Heartbeat(
            running=tuple(running),
            load={"load1": load1, "load5": load5, "load15": load15, "mem_free_mb": free_mb},
            shares=tuple(shares),
        )
        try:
            sent = fence.now()
            answer = await self._send_heartbeat(body, direct=direct or bool(output))
            self._contacted(sent, answer)
            self._check_poll(answer)
            state.output.taken(chunks)
            if (
                isinstance(answer, dict)
                and answer.get("register_again")
                and state.registered.is_set()
            ):
                # A controller that restarted or took over has not heard how we contain jobs.
                state.registered.clear()
                state.spawn(self.register())
            return True
        except ApiError as exc:
            if output and exc.status in (400, 413):
                # Never lose a heartbeat over its output: send it again without.
                state.output.refused(exc.status, exc.message)
                return await self._heartbeat([], direct)
            await self._on_error(exc)
            return False

    async def _send_heartbeat(self, body: protocol.Heartbeat, direct: bool) -> Any:
        """Through the relay when one is set (`[worker] heartbeat_relay`) and this worker's
        registration got a relay key; else, or with job output, or for `RELAY_RETRY_S` after
        the relay failed, straight to the controller."""
        state = self.state
        relay, key = state.relay_client, state.relay_signer.key
        now = asyncio.get_running_loop().time()
        if (
            relay is not None
            and key is not None
            and not direct
            and now >= self._relay_off_until
            and not self._direct_lost(now)
        ):
            answer = await self._through_relay(relay, key, body)
            if answer is not None:
                return answer
            self._relay_off_until = now + RELAY_RETRY_S
        try:
            answer = await state.post(f"{state.base}/heartbeat", body, timeout=10)
        except ApiError as exc:
            self._direct_failed(exc)
            raise
        self._direct_answered()
        return answer

    def _direct_answered(self) -> None:
        if self._direct_failing_since is not None:
            log.info("the controller answers requests sent straight to it again")
        self._direct_failing_since = None

    def _direct_failed(self, exc: ApiError) -> None:
        """A request straight to the controller went unanswered (no controller reached, a
        timeout, a server error): counted from the first such since the last answer."""
        if (exc.status == 0 or exc.status >= 500) and self._direct_failing_since is None:
            self._direct_failing_since = asyncio.get_running_loop().time()

    def _direct_lost(self, now: float) -> bool:
        """Whether requests straight to the controller have failed for `DIRECT_LOST_S`:
        heartbeats then skip the relay (said once in the log)."""
        since = self._direct_failing_since
        if since is None or now - since < DIRECT_LOST_S:
            return False
        if self._relay_off_until < now:  # said once per RELAY_RETRY_S, not per heartbeat
            log.warning(
                "the controller has answered nothing sent straight to it for %.0f s: "
                "heartbeats go straight to it too, not through the relay, so that it sees "
                "this host cut off instead of online without work",
                now - since,
            )
            self._relay_off_until = now + RELAY_RETRY_S
        return True

    async def _through_relay(
        self, relay: XceClient, key: bytes, body: protocol.Heartbeat
    ) -> dict[str, Any] | None:
        """The controller's answer through the relay if its proof verifies, else None (said
        in the log): whatever the relay says for itself, or passes on without the
        controller's proof (a refusal included), is the relay failing, never contact."""
        state = self.state
        signed = state.relay_signer.sign(state.host, msgspec.json.encode(body).decode())
        try:
            entry = await relay.request(
                "POST",
                f"{state.base}/relayed-heartbeat",
                data=msgspec.json.encode(signed),
                headers={"Content-Type": "application/json"},
                timeout=RELAY_FORWARD_TIMEOUT_S + 1.0,  # the relay's own bound, and its window
            )
        except ApiError as exc:
            why = exc.message
        else:
            answer, why = proven(entry, key, state.host, signed.seq)
            if answer is not None:
                return answer
        log.warning(
            "heartbeat relay %s: %s; straight to the controller for %.0f s",
            state.settings.heartbeat_relay,
            why,
            RELAY_RETRY_S,
        )
        return None

    async def report_shares_now(self) -> None:
        """A heartbeat at once, without output, so the controller has a share's figures
        before the task that just ended there is reported to its caller (xce/worker/
        tasks.py): the job's final usage then counts it."""
        try:
            # direct: the figures are awaited, and a relay's window would only delay them
            await asyncio.wait_for(self._heartbeat([], direct=True), SHARE_REPORT_WAIT_S)
        except TimeoutError:
            log.warning(
                "the controller did not take a share's usage within %s s", SHARE_REPORT_WAIT_S
            )

    def _contacted(self, sent: float, answer: Any) -> None:
        """A controller took our registration or heartbeat sent at `sent`: the keepers'
        fence starts again from then (never from the answer's arrival, which is later than
        the controller's own record of the contact)."""
        state = self.state
        timeout = state.contact.fence_timeout_s
        if isinstance(answer, dict) and isinstance(answer.get("fence_timeout_s"), int | float):
            timeout = float(answer["fence_timeout_s"])
        state.contact = fence.Contact(max(sent, state.contact.at), timeout)
        told = answer.get("heartbeat_interval_s") if isinstance(answer, dict) else None
        if isinstance(told, int | float) and not isinstance(told, bool) and 0 < told < 3600:
            # Never so long that fewer than FENCE_BEATS heartbeats fit in the fence.
            state.told_interval_s = min(float(told), timeout / FENCE_BEATS)
        state.output_limits = staging.OutputLimits.of(answer) or state.output_limits
        try:
            fence.record(str(state.spool.state), state.contact)
        except OSError as exc:
            log.error("cannot record the controller contact (%s): jobs will be fenced", exc)

    async def _on_error(self, exc: ApiError) -> None:
        if exc.status == 404:
            log.warning("controller does not know this host (%s): registering again", exc.message)
            self.state.registered.clear()
            await self.register()
            return
        log.warning("controller request failed: %s", exc.message)
        await asyncio.sleep(1.0)


def heartbeat_interval(state: AgentState, answered: bool = True) -> float:
    """The wait before the next heartbeat: this worker's interval or the controller's
    longer one, less up to `HEARTBEAT_JITTER` of it at random. After a heartbeat that was
    not `answered` (a failover, a loaded controller) this worker's own interval: the
    longer one is for a controller that hears us, and the keepers' fence runs from the
    last heartbeat that was taken."""
    told = state.told_interval_s if answered else None
    interval = max(state.settings.heartbeat_interval_s, told or 0.0)
    return interval * (1.0 - HEARTBEAT_JITTER * random.random())


def _output(streams: dict[str, Any] | None) -> protocol.Output | None:
    """A running job's new output (xce/worker/agent/tail.py) as the heartbeat declares it."""
    if not streams:
        return None
    return protocol.Output(**{name: protocol.OutputChunk(**c) for name, c in streams.items()})
