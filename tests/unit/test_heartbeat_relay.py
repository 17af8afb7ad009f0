"""The relay's batcher (xce/worker/agent/relay.py): heartbeats that arrive together go in one
request, each gets its own entry of the answer, and what the relay cannot forward is
answered 503 so that its worker goes straight to the controller; and the worker's check of
an answer's proof (xce/worker/agent/link.py `proven`). The whole path with real processes
is tests/integration/test_heartbeat_relay_e2e.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import msgspec
import pytest

from tests.unit.test_worker_messages import make_agent
from xce.client import ApiError, XceClient
from xce.config.guard import ConnectionSettings
from xce.config.settings import TlsSettings
from xce.protocol import worker as protocol
from xce.protocol.relay_keys import RelaySigner, answer_proof, heartbeat_mac, proven
from xce.protocol.worker import RelayedHeartbeats
from xce.worker.agent import link
from xce.worker.agent.relay import (
    RELAY_BURST_PER_ADDRESS,
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
                {"host": h, "status": 401, "error": {"code": "unauthorized", "message": "no"}}
                if h in self.refuse
                else {"host": h, "status": 200, "answer": {"version": i}, "proof": "p"}
                for i, h in enumerate(hosts)
            ]
        }


KEY = bytes(range(32))


def _signed(host: str, seq: int = 1, heartbeat: str = '{"running": []}') -> bytes:
    mac = heartbeat_mac(KEY, host, seq, heartbeat)
    return json.dumps({"seq": seq, "heartbeat": heartbeat, "mac": mac}).encode()


def _entry(host: str) -> Any:
    return relayed(host, _signed(host))


async def test_heartbeats_that_arrive_together_go_in_one_request() -> None:
    ctl = Controller(refuse=frozenset({"b"}))
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05)
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in ("a", "b", "c")))
    assert ctl.batches == [["a", "b", "c"]]
    assert answers[0] == (200, {"host": "a", "status": 200, "answer": {"version": 0}, "proof": "p"})
    assert answers[1] == (
        200,
        {"host": "b", "status": 401, "error": {"code": "unauthorized", "message": "no"}},
    )
    assert answers[2][1]["answer"] == {"version": 2}


async def test_a_full_batch_goes_at_once_and_the_rest_after_the_window() -> None:
    ctl = Controller()
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05, batch=4)
    hosts = [f"h{i}" for i in range(10)]
    answers = await asyncio.gather(*(batcher.relay(_entry(h)) for h in hosts))
    assert [len(b) for b in ctl.batches] == [4, 4, 2]
    assert [h for b in ctl.batches for h in b] == hosts
    assert all(status == 200 for status, _ in answers)
    assert batcher.pending == batcher.held == 0


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
    assert (await batcher.relay(_entry("d"), 1000))[0] == 200  # all given back


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


async def test_a_batch_stays_within_its_bytes() -> None:
    """No batch is refused whole for its size: a heartbeat that would take one past
    `batch_bytes` starts the next."""
    ctl = Controller()
    batcher = HeartbeatBatcher(ctl.send, window_s=0.05, batch_bytes=1000)
    sizes = (400, 400, 400, 900, 10)
    answers = await asyncio.gather(
        *(batcher.relay(_entry(h), size) for h, size in zip("abcde", sizes, strict=True))
    )
    assert [a[0] for a in answers] == [200] * 5
    assert ctl.batches == [["a", "b"], ["c"], ["d", "e"]]


async def test_what_is_being_forwarded_counts_against_what_a_relay_holds() -> None:
    gate = asyncio.Event()

    async def slow(body: bytes) -> Any:
        await gate.wait()
        return {"answers": [{"host": "a"}, {"host": "b"}]}

    batcher = HeartbeatBatcher(slow, window_s=0.01, max_pending=2)
    first = [asyncio.ensure_future(batcher.relay(_entry(h))) for h in "ab"]
    await asyncio.sleep(0.05)  # forwarded, not answered: still held
    assert batcher.pending == 0 and batcher.held == 2
    assert (await batcher.relay(_entry("c")))[0] == 503
    gate.set()
    assert [(await f)[0] for f in first] == [200, 200]


@pytest.mark.parametrize(
    ("host", "body"),
    [
        ("a b", _signed("a b")),  # the controller would refuse the batch
        ("a", b"{"),
        ("a", b'{"seq": 0, "heartbeat": "{}", "mac": "' + b"0" * 64 + b'"}'),
        ("a", b'{"seq": 1, "heartbeat": "{}", "mac": "zz"}'),
        ("a", b'{"seq": 1, "heartbeat": "{}"}'),
        ("a", b'{"seq": 1, "heartbeat": "{}", "mac": "' + b"0" * 64 + b'", "token": "t"}'),
    ],
)
def test_what_the_controller_would_refuse_whole_is_refused_before_it_joins_a_batch(
    host: str, body: bytes
) -> None:
    with pytest.raises(ValueError):
        relayed(host, body)


def test_an_entry_carries_the_hosts_signed_text_as_it_was_sent() -> None:
    entry = relayed("w7", _signed("w7", 3, '{"load": {"load1": 0.5}}'))
    assert (entry.host, entry.seq, entry.heartbeat) == ("w7", 3, '{"load": {"load1": 0.5}}')
    assert entry.mac == heartbeat_mac(KEY, "w7", 3, entry.heartbeat)


def test_a_worker_takes_a_relayed_answer_only_with_the_controllers_proof() -> None:
    """The fence: a relay that answers for the controller (made-up contact, a longer fence)
    or passes on another host's or an older answer is a relay that failed."""
    answer = {"version": 4, "register_again": False, "heartbeat_interval_s": 7.5}
    good = {"host": "w1", "status": 200, "answer": answer}
    good["proof"] = answer_proof(KEY, "w1", 9, answer)
    assert proven(good, KEY, "w1", 9) == (answer, "")
    forged = {**good, "answer": {**answer, "fence_timeout_s": 1e12}}
    for entry, seq, host in [
        (forged, 9, "w1"),  # the answer altered
        (good, 8, "w1"),  # an older heartbeat's answer
        (good, 9, "w2"),  # another host's
        ({**good, "proof": "0" * 64}, 9, "w1"),
        ({k: v for k, v in good.items() if k != "proof"}, 9, "w1"),
        ({"host": "w1", "status": 401, "error": {"message": "no"}}, 9, "w1"),
        ("nonsense", 9, "w1"),
    ]:
        assert proven(entry, KEY, host, seq)[0] is None, entry
    assert proven(good, bytes(32), "w1", 9)[0] is None  # another registration's key


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


async def test_a_flood_of_heartbeats_from_one_address_is_held_to_its_share() -> None:
    """A job on one host floods the rack's relay with made-up heartbeats (the controller
    would refuse each after one check, but the relay would forward them all and fill its
    queue for everyone): past a burst, that address is answered 429 with Retry-After
    before its body is read, while another address is still taken."""
    relay = HeartbeatRelay(XceClient(["http://127.0.0.1:9"]))
    host, port = (await relay.start("127.0.0.1", 0, TlsSettings())).rsplit(":", 1)
    url = f"http://{host}:{port}/api/v1/workers/w9/relayed-heartbeat"
    junk = b'{"seq": 1, "heartbeat": "{}", "mac": "00"}'

    async def statuses(source: str, n: int) -> list[tuple[int, str | None]]:
        connector = aiohttp.TCPConnector(local_addr=(source, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            got = []
            for _ in range(n):
                async with session.post(url, data=junk) as resp:
                    await resp.read()
                    got.append((resp.status, resp.headers.get("Retry-After")))
            return got

    try:
        hog = await statuses("127.0.0.1", RELAY_BURST_PER_ADDRESS + 10)
        assert all(status != 429 for status, _ in hog[: RELAY_BURST_PER_ADDRESS - 2])
        held = [after for status, after in hog if status == 429]
        assert len(held) >= 10 and all(after is not None and int(after) >= 1 for after in held)
        assert (await statuses("127.0.0.2", 1))[0][0] != 429  # another host's share
    finally:
        await relay.close()
        await relay.client.close()


def test_a_worker_signs_only_with_the_key_its_registration_gave() -> None:
    signer = RelaySigner()
    for answer in ({}, {"relay_key": "not hex"}, {"relay_key": ""}, "nonsense"):
        signer.take(answer)  # a controller without relays, or nonsense: heartbeats go direct
        assert signer.key is None
    signer.take({"relay_key": KEY.hex()})
    first, second = signer.sign("w1", "{}"), signer.sign("w1", "{}")
    assert (first.seq, second.seq) == (1, 2)
    assert second.mac == heartbeat_mac(KEY, "w1", 2, "{}")
    signer.take({"relay_key": KEY.hex()})  # a new registration numbers afresh
    assert signer.sign("w1", "{}").seq == 1


class _CutOff:
    """A controller this worker cannot reach straight (while `cut`), and a relay that
    still carries its heartbeats there and back with the controller's proof."""

    def __init__(self) -> None:
        self.cut = True
        self.direct: list[str] = []
        self.relayed = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.direct.append(path)
        if self.cut:
            raise ApiError(0, "unreachable", "no controller answered")
        return {"version": 1, "jobs": []}

    async def relay(self, method: str, path: str, **kwargs: Any) -> Any:
        self.relayed += 1
        signed = msgspec.json.decode(kwargs["data"])
        answer = {"version": 1, "register_again": False}
        proof = answer_proof(KEY, "w1", signed["seq"], answer)
        return {"host": "w1", "status": 200, "answer": answer, "proof": proof}


def test_a_host_its_controller_cannot_answer_stops_beating_through_its_relay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut off from the controller but not from its relay, a host got no work (its polls
    fail) yet looked online (its relayed heartbeats arrived). Once requests straight to the
    controller have failed for DIRECT_LOST_S, its heartbeats go straight there too (and
    fail, so the controller sees the host cut off and runs its jobs elsewhere); once the
    controller answers again, the relay carries them again."""
    monkeypatch.setattr(link, "DIRECT_LOST_S", 0.2)
    monkeypatch.setattr(link, "RELAY_RETRY_S", 0.0)
    net = _CutOff()
    agent = make_agent(tmp_path, net)  # type: ignore[arg-type]
    agent.state.relay_client = SimpleNamespace(request=net.relay)  # type: ignore[assignment]
    agent.state.relay_signer.take({"relay_key": KEY.hex()})
    body = protocol.Heartbeat(running=(), load={})

    async def main() -> None:
        beat = agent.link._send_heartbeat
        assert await beat(body, False) == {"version": 1, "register_again": False}
        poll = asyncio.create_task(agent.link.poll_loop())  # its polls fail: cut off
        await asyncio.sleep(0.05)
        assert await beat(body, False) is not None and net.relayed == 2  # not for long yet
        await asyncio.sleep(0.3)
        with pytest.raises(ApiError, match="no controller answered"):
            await beat(body, False)  # straight to the controller, which it cannot reach
        assert net.relayed == 2 and net.direct[-1].endswith("/heartbeat")
        net.cut = False  # healed: the next poll is answered, and the relay is used again
        await asyncio.sleep(1.2)
        poll.cancel()
        assert await beat(body, False) is not None and net.relayed == 3

    asyncio.run(main())
