"""Heartbeat relays: a worker that forwards other workers' heartbeats to the controller in
batches, Slurm's tree fan-out of node messages.

At 10,000 hosts most of a controller's work is heartbeats, and most of a heartbeat's cost is
its request (a socket read, a parse, an answer written: ~0.2 ms on a small VM) rather than
what it says. A worker with `relay_listen` serves `POST /api/v1/workers/{host}/relayed-
heartbeat`; a worker with `heartbeat_relay` pointing at it sends there its heartbeat's JSON
text, numbered and signed with the relay key its registration got (xce/protocol/
relay_keys.py). The relay gathers what arrives within `window_s` and forwards it as one
`POST /api/v1/workers/heartbeats` with its own worker token. The controller checks each
entry's signature and number, takes it as if the host had sent it, and answers each in its
own entry with a proof under the same key, which the relay hands back untouched.

No token crosses a relay, and a worker counts a relayed answer as contact with the
controller (restarting its keepers' fence) only when its proof verifies: a relay can delay
or drop heartbeats, never speak for a host or for the controller. Whatever a worker cannot
verify (a refusal, a relay that is down, busy or cut off from the controller) sends it
straight to the controller instead (xce/worker/agent/link.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from xce.auth.guard import RateLimiter
from xce.auth.pki import server_ssl_context
from xce.client import ApiError, XceClient
from xce.client.transport import check_listener
from xce.config.guard import ConnectionSettings, RateSettings
from xce.config.settings import TlsSettings
from xce.listen.connections import GuardedRunner
from xce.listen.sites import GuardedSite
from xce.protocol.worker import (
    RELAY_BATCH_MAX,
    RELAY_HEARTBEAT_MAX,
    RelayedHeartbeat,
    RelayedHeartbeats,
    RelayHeartbeat,
)

log = logging.getLogger("xce.worker.relay")

# How long the first heartbeat of a batch waits for others: a small share of any heartbeat
# interval, and at 10,000 hosts every 7.5 s about 270 heartbeats.
RELAY_WINDOW_S = 0.2
# Heartbeats per forwarded request, and at most this many bytes of them (well under the
# controller's default body limit of 1 MiB, so that no batch is refused whole for its size).
RELAY_BATCH = 500
RELAY_BATCH_BYTES = 256 * 1024
# What the relay holds at most, queued or being forwarded, before it answers 503 (its
# workers then go straight to the controller): the relay runs in a root worker, and any
# job on any host can send to it.
RELAY_MAX_PENDING = 20_000
RELAY_MAX_PENDING_BYTES = 32 * 1024 * 1024
# A request's body: a signed heartbeat (RELAY_HEARTBEAT_MAX of text) and its envelope.
RELAY_ENTRY_MAX_BYTES = RELAY_HEARTBEAT_MAX + 1024
# Connections from one address the relay keeps open (a worker's client holds one or two).
RELAY_CONNECTIONS_PER_ADDRESS = 32
# Heartbeats one address may hand the relay: a burst, then a steady rate; past it a 429
# with Retry-After (its worker then beats straight to the controller). A host beats every
# few seconds, so a job that floods the relay with made-up entries, each of which the
# controller would refuse after one check, uses up its own host's share and nobody else's.
RELAY_RATE_PER_ADDRESS = 2.0
RELAY_BURST_PER_ADDRESS = 20
# How long a batch may take to be answered: well inside the workers' own 10 s wait for the
# relay, so that a heartbeat the controller took late is never one its worker gave up on.
RELAY_FORWARD_TIMEOUT_S = 5.0
LOG_EVERY_S = 60.0  # a relay that fails says so at most this often
_JSON = {"Content-Type": "application/json"}

Answer = tuple[int, dict[str, Any]]
Send = Callable[[bytes], Awaitable[Any]]


def _error(status: int, code: str, message: str) -> Answer:
    return status, {"error": {"code": code, "message": message}}


class HeartbeatBatcher:
    """Heartbeats in, batches out: `relay` waits for its host's entry of the answer, which
    comes when the batch it joined has been forwarded by `send` (the encoded
    `RelayedHeartbeats` in, the controller's JSON answer out, `ApiError` for a failure).

    The answer to a sender is (200, the controller's entry for it, proof and all) or a
    refusal of the relay's own (503 when it cannot forward now, 502 when the controller
    refused the batch or answered nonsense); the worker trusts neither more than its proof.
    """

    def __init__(
        self,
        send: Send,
        window_s: float = RELAY_WINDOW_S,
        batch: int = RELAY_BATCH,
        max_pending: int = RELAY_MAX_PENDING,
        max_pending_bytes: int = RELAY_MAX_PENDING_BYTES,
        batch_bytes: int = RELAY_BATCH_BYTES,
    ) -> None:
        self.send = send
        self.window_s = window_s
        self.batch = min(batch, RELAY_BATCH_MAX)
        self.batch_bytes = batch_bytes
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        # heartbeats (and their bytes) queued or being forwarded: what senders make it hold
        self.held = 0
        self._held_bytes = 0
        self._queue: list[_Waiting] = []
        self._queued_bytes = 0
        self._flusher: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._logged_at = -LOG_EVERY_S

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def relay(self, entry: RelayedHeartbeat, size: int = 0) -> Answer:
        """The controller's entry for `entry` (whose body was `size` bytes), or the
        relay's refusal: (status, JSON body)."""
        if self.held >= self.max_pending or self._held_bytes + size > self.max_pending_bytes:
            return _error(503, "relay_busy", "the relay holds too many heartbeats; send directly")
        done: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.held += 1
        self._held_bytes += size
        try:
            if self._queued_bytes + size > self.batch_bytes:
                self._forward_queued()  # this one starts the next batch
            self._queue.append(_Waiting(entry, size, done))
            self._queued_bytes += size
            if len(self._queue) >= self.batch:
                self._forward_queued()
            elif self._flusher is None:
                self._flusher = asyncio.create_task(self._after_window())
            return await done
        finally:
            self.held -= 1
            self._held_bytes -= size

    async def _after_window(self) -> None:
        try:
            await asyncio.sleep(self.window_s)
        finally:
            self._flusher = None
        self._forward_queued()

    def _forward_queued(self) -> None:
        """Send what is queued as one batch (`relay` keeps it within `batch` and
        `batch_bytes`); batches go side by side."""
        queued, self._queue, self._queued_bytes = self._queue, [], 0
        if queued:
            task = asyncio.create_task(self._forward(queued))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _forward(self, part: list[_Waiting]) -> None:
        body = msgspec.json.encode(RelayedHeartbeats(heartbeats=tuple(w.entry for w in part)))
        try:
            answer = await self.send(body)
            answers = answer["answers"]
            if not isinstance(answers, list) or len(answers) != len(part):
                raise ValueError(f"{len(answers)} answers to {len(part)} heartbeats")
        except ApiError as exc:
            if exc.status == 0 or exc.status >= 500:
                why = _error(503, "relay_unavailable", f"the relay reached no controller: {exc}")
            else:
                why = _error(502, "relay_refused", f"the controller refused the relay: {exc}")
            self._failed(part, why)
            return
        except (KeyError, TypeError, ValueError) as exc:
            self._failed(part, _error(502, "relay_bad_answer", f"the controller's answer: {exc}"))
            return
        except Exception as exc:  # whatever else failed, its workers go direct
            why = _error(503, "relay_unavailable", f"the relay reached no controller: {exc}")
            self._failed(part, why)
            return
        except BaseException:
            self._answer_all(part, _error(503, "relay_unavailable", "the relay is stopping"))
            raise
        for waiting, item in zip(part, answers, strict=True):
            if waiting.done.done():
                continue
            if not isinstance(item, dict) or item.get("host") != waiting.entry.host:
                waiting.done.set_result(_error(502, "relay_bad_answer", "answers out of order"))
            else:
                waiting.done.set_result((200, item))

    def _failed(self, part: list[_Waiting], answer: Answer) -> None:
        """Answer a batch that was not forwarded; said in the log at most once a minute."""
        self._answer_all(part, answer)
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning(
                "%d heartbeats not relayed (their workers go straight to the controller): %s",
                len(part),
                answer[1]["error"]["message"],
            )

    @staticmethod
    def _answer_all(part: list[_Waiting], answer: Answer) -> None:
        for waiting in part:
            if not waiting.done.done():
                waiting.done.set_result(answer)

    async def close(self) -> None:
        """Answer what waits (503: its workers go direct) and stop."""
        if self._flusher is not None:
            self._flusher.cancel()
        queued, self._queue, self._queued_bytes = self._queue, [], 0
        self._answer_all(queued, _error(503, "relay_unavailable", "the relay is stopping"))
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)


@dataclasses.dataclass
class _Waiting:
    entry: RelayedHeartbeat
    size: int
    done: asyncio.Future[Answer]


def relayed(host: str, raw: bytes) -> RelayedHeartbeat:
    """One worker's request (a `RelayHeartbeat`) as the entry the relay forwards;
    `ValueError` (a 400 for its sender) for what the controller would refuse as a whole, so
    that one bad request never costs a batch its answers. Its signature is the
    controller's to check: the relay holds no key."""
    try:
        signed = msgspec.json.decode(raw, type=RelayHeartbeat)
        return msgspec.convert({"host": host, **msgspec.structs.asdict(signed)}, RelayedHeartbeat)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from exc


class HeartbeatRelay:
    """The relay's listener (`[worker] relay_listen`, guarded as the controller's listener
    is: xce/listen/connections.py) in front of a batcher that forwards with this worker's
    own controller client (and token: a worker's; the relayed hosts send none)."""

    def __init__(
        self,
        client: XceClient,
        connections: ConnectionSettings | None = None,
        window_s: float = RELAY_WINDOW_S,
    ) -> None:
        self.client = client
        self.batcher = HeartbeatBatcher(self._send, window_s)
        # `[guard]`'s read timeouts, and at most RELAY_CONNECTIONS_PER_ADDRESS per address
        base = connections or ConnectionSettings()
        cap = min(
            base.max_connections_per_address or RELAY_CONNECTIONS_PER_ADDRESS,
            RELAY_CONNECTIONS_PER_ADDRESS,
        )
        self.connections = dataclasses.replace(base, max_connections_per_address=cap)
        self.rates = RateLimiter(RateSettings(RELAY_RATE_PER_ADDRESS, RELAY_BURST_PER_ADDRESS))
        self._runner: web.AppRunner | None = None
        self.address = ""

    async def _send(self, body: bytes) -> Any:
        return await self.client.request(
            "POST",
            "/api/v1/workers/heartbeats",
            data=body,
            headers=_JSON,
            timeout=RELAY_FORWARD_TIMEOUT_S,
        )

    async def _heartbeat(self, request: web.Request) -> web.Response:
        peer = request.remote or "local"
        wait = self.rates.take(peer, time.monotonic())
        if wait:
            status, body = _error(
                429,
                "rate_limited",
                f"more than {RELAY_RATE_PER_ADDRESS:g} heartbeats a second from {peer}: send "
                "them straight to the controller",
            )
            return web.json_response(
                body, status=status, headers={"Retry-After": str(math.ceil(wait))}
            )
        too_big = _error(413, "payload_too_large", "send this heartbeat straight to the controller")
        if request.content_length is not None and request.content_length > RELAY_ENTRY_MAX_BYTES:
            status, body = too_big
            return web.json_response(body, status=status)
        try:
            raw = await request.read()
            entry = relayed(request.match_info["host"], raw)
        except ValueError as exc:
            status, body = _error(400, "invalid_request", str(exc))
        except web.HTTPRequestEntityTooLarge:
            status, body = too_big
        else:
            status, body = await self.batcher.relay(entry, len(raw))
        return web.json_response(body, status=status)

    async def start(self, host: str, port: int, tls: TlsSettings) -> str:
        """Listen; returns HOST:PORT. Plain HTTP off loopback is refused as the
        controller's listener is: no token crosses a relay, but what its workers run does."""
        ssl_context = server_ssl_context(tls)
        check_listener(host, ssl_context is not None, tls.insecure)
        app = web.Application(client_max_size=RELAY_ENTRY_MAX_BYTES)
        app.router.add_post("/api/v1/workers/{host}/relayed-heartbeat", self._heartbeat)
        self._runner = GuardedRunner(app, self.connections, access_log=None)
        await self._runner.setup()
        site = GuardedSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        self.address = f"{host}:{bound}"
        log.info("relaying heartbeats on %s", self.address)
        return self.address

    async def close(self) -> None:
        await self.batcher.close()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None
