"""The relay's batcher (xce/worker/agent/relay.py): heartbeats that arrive together go in one
request, each gets its own entry of the answer, and what the relay cannot forward is
answered 503 so that its worker goes straight to the controller. The whole path with real
processes is tests/integration/test_heartbeat_relay_e2e.py."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from xce.client import ApiError, XceClient
from xce.config.guard import ConnectionSettings
from xce.config.settings import TlsSettings
from xce.protocol.worker import RelayedHeartbeats
from xce.worker.agent.relay import (
    RELAY_CONNECTIONS_PER_ADDRESS,
    HeartbeatBatcher,
    HeartbeatRelay,
    relayed,
)


class Controller:
    """Answers batches as the controller's route does, host by host; refuses `refuse`."""

    def __init__(self, refuse: frozenset[str] = frozenset(), fail: ApiError | None = None):
        self.batches: list[list[str]] = []
        self.refuse = refuse
        self.fail = fail

    async def send(self, body: bytes) -> Any:
        batch = msgspec.json.decode(body, type=RelayedHeartbeats)
        hosts = [b.host for b in batch.heartbeats]
        self.batches.append(hosts)
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return {
            "answers": [
                {"host": h, "status": 403, "error": {"code": "forbidden", "message": "no"}}
                if h in self.refuse
                else {"host": h, "status": 200, "answer": {"version": i}}
                for i, h in enumerate(hosts)
            ]
        }


def _entry(host: str) -> Any:
    return relayed(host, "Bearer tok-" + host, b'{"running": []}')


async def test_heartbeats_that_arrive_together_go_in_one_request() -> None:
    ctl = Controller(refuse=frozenset({"b"}))
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05)
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in ("a", "b", "c")))
    assert ctl.batches == [["a", "b", "c"]]
    assert answers[0] == (200, {"version": 0})
    assert answers[1] == (403, {"error": {"code": "forbidden", "message": "no"}})
    assert answers[2] == (200, {"version": 2})


async def test_a_full_batch_goes_at_once_and_the_rest_after_the_window() -> None:
    ctl = Controller()
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05, batch=4)
    hosts = [f"h{i}" for i in range(10)]
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in hosts))
    assert [len(b) for b in ctl.batches] == [4, 4, 2]
    assert [h for b in ctl.batches for h in b] == hosts
    assert all(status == 200 for status, _ in answers)
    assert batcher.pending == 0


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (ApiError(0, "unreachable", "connection refused"), 503),
        (ApiError(503, "not_primary", "a standby"), 503),
        (ApiError(403, "forbidden", "the relay's token is no worker's"), 502),
    ],
)
async def test_a_batch_the_controller_never_answered_sends_its_workers_elsewhere(
    failure: ApiError, status: int
) -> None:
    """5xx: the workers go straight to the controller (xce/worker/agent/link.py)."""
    batcher = HeartbeatBatcher(Controller(fail=failure).send, window_s=0.01)
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in ("a", "b")))
    assert [a[0] for a in answers] == [status, status]
    assert failure.message in answers[0][1]["error"]["message"]


async def test_a_relay_that_holds_too_much_says_busy() -> None:
    ctl = Controller()
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05, max_pending=2)
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in ("a", "b", "c")))
    assert [a[0] for a in answers] == [200, 200, 503]
    assert ctl.batches == [["a", "b"]]


async def test_a_relay_holds_a_bounded_number_of_bytes() -> None:
    """Senders need no token to reach a relay: what they can make it hold is bounded."""
    ctl = Controller()
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05, max_pending_bytes=1000)
    sizes = (600, 300, 200)
    answers = await asyncio.gather(
        *(batcher.relay(_entry(h), size) for h, size in zip("abc", sizes, strict=True))
    )
    assert [a[0] for a in answers] == [200, 200, 503]
    assert await batcher.relay(_entry("d"), 1000) == (200, {"version": 0})  # all given back


async def test_answers_that_do_not_match_the_batch_answer_no_one_wrongly() -> None:
    async def shuffled(body: bytes) -> Any:
        return {"answers": [{"host": "b", "status": 200, "answer": {}}, {"host": "a"}]}

    batcher = HeartbeatBatcher(shuffled, window_s=0.01)
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in ("a", "b")))
    assert [a[0] for a in answers] == [502, 502]


async def test_closing_answers_what_waits() -> None:
    gate = asyncio.Event()

    async def slow(body: bytes) -> Any:
        await gate.wait()

    batcher = HeartbeatBatcher(slow, window_s=10)
    waiting = asyncio.ensure_future(batcher.relay(_entry("a")))
    await asyncio.sleep(0.01)
    await batcher.close()
    assert (await waiting)[0] == 503


@pytest.mark.parametrize(
    ("host", "authorization", "body", "error"),
    [
        ("a", "", b"{}", PermissionError),
        ("a", "Basic x", b"{}", PermissionError),
        ("a", "Bearer  ", b"{}", PermissionError),
        ("a b", "Bearer t", b"{}", ValueError),  # the controller would refuse the batch
        ("a", "Bearer t", b"{", ValueError),
        ("a", "Bearer t", b'{"load": {"x": "y"}}', ValueError),
        ("a", "Bearer t", b'{"surprise": 1}', ValueError),
    ],
)
def test_what_the_controller_would_refuse_is_refused_before_it_joins_a_batch(
    host: str, authorization: str, body: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        relayed(host, authorization, body)


def test_an_entry_carries_the_hosts_own_token() -> None:
    entry = relayed("w7", "Bearer abc.def", b'{"load": {"load1": 0.5}}')
    assert (entry.host, entry.token, entry.heartbeat.load) == ("w7", "abc.def", {"load1": 0.5})


async def test_a_flood_of_connections_to_a_relay_is_capped_and_timed_out() -> None:
    """The relay runs in a root worker and any job can reach it: connections from one
    address are capped, and one that sends no request is closed, as at the controller."""
    relay = HeartbeatRelay(
        XceClient(["http://127.0.0.1:9"]), ConnectionSettings(header_timeout_s=0.5)
    )
    host, port = (await relay.start("127.0.0.1", 0, TlsSettings())).rsplit(":", 1)
    held = []
    try:
        for _ in range(RELAY_CONNECTIONS_PER_ADDRESS):
            held.append(await asyncio.open_connection(host, int(port)))
        reader, writer = await asyncio.open_connection(host, int(port))
        refused = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert refused.startswith(b"HTTP/1.1 503") and b"too_many_connections" in refused
        timed_out = await asyncio.wait_for(held[0][0].read(), 5)  # sent nothing at all
        assert timed_out.startswith(b"HTTP/1.1 408")
    finally:
        for _, w in held:
            w.close()
        await relay.close()
        await relay.client.close()
