"""Heartbeat relays: a worker that forwards other workers' heartbeats to the controller in
batches, Slurm's tree fan-out of node messages.

At 10,000 hosts most of a controller's work is heartbeats, and most of a heartbeat's cost is
its request (a socket read, a parse, an answer written: ~0.2 ms on a small VM) rather than
what it says. A worker with `relay_port` set serves `POST /api/v1/workers/{host}/heartbeat`,
the controller's own route, so a worker with `heartbeat_relay` pointing at it sends there
what it would send the controller; the relay gathers what arrives within `window_s` and
forwards it as one `POST /api/v1/workers/heartbeats`. Each heartbeat carries its own host's
bearer token, which the controller checks as if the host had sent it: a relay can delay or
drop a heartbeat, never speak for a host. Each host's answer (or refusal) goes back to it as
the controller's own answer would.

Only the relay's answer is contact for a worker's fence when the controller answered
through it. When the relay cannot reach a controller, every waiting heartbeat gets a 503,
and its worker sends the heartbeat straight to the controller instead (xce/worker/agent/
link.py), so a relay that dies or is cut off costs its workers one round trip, not their
jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from xce.auth.pki import server_ssl_context
from xce.client import ApiError, XceClient
from xce.client.transport import check_listener
from xce.config.guard import ConnectionSettings
from xce.config.settings import TlsSettings
from xce.listen.connections import GuardedRunner
from xce.protocol.worker import RELAY_BATCH_MAX, RelayedHeartbeat, RelayedHeartbeats

log = logging.getLogger("xce.worker.relay")

# How long the first heartbeat of a batch waits for others: a small share of any heartbeat
# interval, and at 10,000 hosts every 7.5 s about 270 heartbeats.
RELAY_WINDOW_S = 0.2
# Heartbeats per forwarded request, and what the relay holds at most before it answers
# 503 (its workers then go straight to the controller).
RELAY_BATCH = 500
RELAY_MAX_PENDING = 20_000
RELAY_MAX_PENDING_BYTES = 32 * 1024 * 1024  # what senders can make a root worker hold
# A heartbeat's body the relay takes, far above an idle host's ~100 bytes; one with job
# output goes straight to the controller anyway (its chunks can reach 64 KiB each).
RELAY_ENTRY_MAX_BYTES = 256 * 1024
# Connections from one address the relay keeps open (a worker's client holds one or two):
# the relay runs in a root worker, and a job on any host can connect to it.
RELAY_CONNECTIONS_PER_ADDRESS = 32
_JSON = {"Content-Type": "application/json"}

Answer = tuple[int, dict[str, Any]]
Send = Callable[[bytes], Awaitable[Any]]


def _error(status: int, code: str, message: str) -> Answer:
    return status, {"error": {"code": code, "message": message}}


class HeartbeatBatcher:
    """Heartbeats in, batches out: `relay` waits for its host's answer, which comes when the
    batch it joined has been forwarded by `send` (the encoded `RelayedHeartbeats` in, the
    controller's JSON answer out, `ApiError` for a failure)."""

    def __init__(
        self,
        send: Send,
        window_s: float = RELAY_WINDOW_S,
        batch: int = RELAY_BATCH,
        max_pending: int = RELAY_MAX_PENDING,
        max_pending_bytes: int = RELAY_MAX_PENDING_BYTES,
    ) -> None:
        self.send = send
        self.window_s = window_s
        self.batch = min(batch, RELAY_BATCH_MAX)
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self._held_bytes = 0  # the bodies of the heartbeats queued or being forwarded
        self._queue: list[tuple[RelayedHeartbeat, asyncio.Future[Answer]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self.forwarded = 0  # batches sent, for the tests and the log

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def relay(self, entry: RelayedHeartbeat, size: int = 0) -> Answer:
        """The controller's answer to `entry` (whose body was `size` bytes): (status, JSON
        body)."""
        if len(self._queue) >= self.max_pending or self._held_bytes + size > self.max_pending_bytes:
            return _error(503, "relay_busy", "the relay holds too many heartbeats; send directly")
        done: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._queue.append((entry, done))
        self._held_bytes += size
        if len(self._queue) >= self.batch:
            self._forward_queued()
        elif self._flusher is None:
            self._flusher = asyncio.create_task(self._after_window())
        try:
            return await done
        finally:
            self._held_bytes -= size

    async def _after_window(self) -> None:
        try:
            await asyncio.sleep(self.window_s)
        finally:
            self._flusher = None
        self._forward_queued()

    def _forward_queued(self) -> None:
        """Send what is queued as batches of at most `batch`, side by side."""
        queued, self._queue = self._queue, []
        for start in range(0, len(queued), self.batch):
            task = asyncio.create_task(self._forward(queued[start : start + self.batch]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _forward(self, part: list[tuple[RelayedHeartbeat, asyncio.Future[Answer]]]) -> None:
        body = msgspec.json.encode(RelayedHeartbeats(heartbeats=tuple(e for e, _ in part)))
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
            self._answer_all(part, why)
            return
        except (KeyError, TypeError, ValueError) as exc:
            why = _error(502, "relay_bad_answer", f"the controller's answer: {exc}")
            self._answer_all(part, why)
            return
        except Exception as exc:  # whatever else failed, its workers go direct
            why = _error(503, "relay_unavailable", f"the relay reached no controller: {exc}")
            self._answer_all(part, why)
            return
        except BaseException:
            self._answer_all(part, _error(503, "relay_unavailable", "the relay is stopping"))
            raise
        self.forwarded += 1
        for (entry, done), item in zip(part, answers, strict=True):
            if done.done():
                continue
            if not isinstance(item, dict) or item.get("host") != entry.host:
                done.set_result(_error(502, "relay_bad_answer", "answers out of order"))
            elif item.get("status") == 200:
                done.set_result((200, item.get("answer") or {}))
            else:
                status = item.get("status")
                code = status if isinstance(status, int) and 400 <= status < 600 else 502
                done.set_result((code, {"error": item.get("error") or {}}))

    @staticmethod
    def _answer_all(
        part: list[tuple[RelayedHeartbeat, asyncio.Future[Answer]]], answer: Answer
    ) -> None:
        for _, done in part:
            if not done.done():
                done.set_result(answer)

    async def close(self) -> None:
        """Answer what waits (503: its workers go direct) and stop."""
        if self._flusher is not None:
            self._flusher.cancel()
        queued, self._queue = self._queue, []
        self._answer_all(queued, _error(503, "relay_unavailable", "the relay is stopping"))
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)


def relayed(host: str, authorization: str, raw: bytes) -> RelayedHeartbeat:
    """One worker's request as the entry the relay forwards; `ValueError` (a 400 or 401
    for its sender) for what the controller would refuse, so that one bad heartbeat
    never costs the whole batch its answers."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise PermissionError("this request needs the worker's bearer token")
    try:
        heartbeat = msgspec.json.decode(raw)
        return msgspec.convert(
            {"host": host, "token": token.strip(), "heartbeat": heartbeat}, RelayedHeartbeat
        )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc).replace("$.heartbeat", "$")) from exc


class HeartbeatRelay:
    """The relay's listener (`[worker] relay_listen`, guarded as the controller's listener
    is: xce/listen/connections.py) in front of a batcher that forwards with this worker's
    own controller client (and token: a worker's)."""

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
        self._runner: web.AppRunner | None = None
        self.address = ""

    async def _send(self, body: bytes) -> Any:
        return await self.client.request(
            "POST", "/api/v1/workers/heartbeats", data=body, headers=_JSON, timeout=30
        )

    async def _heartbeat(self, request: web.Request) -> web.Response:
        if request.content_length is not None and request.content_length > RELAY_ENTRY_MAX_BYTES:
            status, body = _error(413, "payload_too_large", "send this heartbeat directly")
            return web.json_response(body, status=status)
        try:
            raw = await request.read()
            entry = relayed(
                request.match_info["host"], request.headers.get("Authorization", ""), raw
            )
        except PermissionError as exc:
            status, body = _error(401, "unauthorized", str(exc))
        except ValueError as exc:
            status, body = _error(400, "invalid_request", str(exc))
        except web.HTTPRequestEntityTooLarge:
            status, body = _error(413, "payload_too_large", "send this heartbeat directly")
        else:
            status, body = await self.batcher.relay(entry, len(raw))
        return web.json_response(body, status=status)

    async def start(self, host: str, port: int, tls: TlsSettings) -> str:
        """Listen; returns HOST:PORT. Plain HTTP off loopback is refused as the
        controller's listener is (a worker's token would cross the network in clear)."""
        ssl_context = server_ssl_context(tls)
        check_listener(host, ssl_context is not None, tls.insecure)
        app = web.Application(client_max_size=RELAY_ENTRY_MAX_BYTES)
        app.router.add_post("/api/v1/workers/{host}/heartbeat", self._heartbeat)
        self._runner = GuardedRunner(app, self.connections, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
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
