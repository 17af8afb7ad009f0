"""Replication between a real primary log and a real standby log, in one process over TCP.

The primary's `DurableLog` + `ReplicationSource` and the standby's `Follower` each own a
state directory; nothing is mocked but the token check. Covers live streaming, catch-up from
the WAL, checkpoint transfer for new, lagging and diverged standbys, and the frames both
sides must refuse without crashing.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from pathlib import Path

import pytest

from tests.ha.test_epochs import claim
from tests.store.test_checkpoint import SPEC, history, same
from xce.config.settings import ControllerSettings
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.errors import NotFound, Unauthorized, XceError
from xce.core.model import JobState, QueueRecord
from xce.ha import protocol
from xce.ha.epochs import EpochStore
from xce.ha.follower import CannotApply, Follower
from xce.ha.source import ReplicationSource
from xce.store.checkpoint import list_checkpoints
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.recovery import checkpoint_dir

# Retention is on: a checkpoint at time.time() purges every finished job of the histories
# below (they end at t < 10), through the primary's JobsPurged event.
SETTINGS = StoreSettings(
    segment_bytes=32 * 1024,
    checkpoint_every=10**9,
    checkpoint_interval_s=3600,
    finished_retention_s=60.0,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_token(token: str) -> None:
    if token != "good":
        raise Unauthorized("the bearer token is not a valid token")


class Primary:
    def __init__(self, root: Path, mode: str = "async") -> None:
        self.dir = root / "primary"
        self.dir.mkdir(mode=0o700, exist_ok=True)  # exists: a restarted primary
        (self.dir / "auth").mkdir(mode=0o700, exist_ok=True)
        (self.dir / "auth" / "keys.json").write_text('{"current": "k1"}')
        self.epochs = EpochStore(self.dir)
        self.store = DurableLog.open(self.dir, SETTINGS)
        claim(self.epochs, self.store.writer.next_seq)
        self.store.writer.epoch = self.epochs.epoch
        self.state = self.store.recovered.state
        self.higher: list[int] = []
        self.source = ReplicationSource(
            self.store,
            self.epochs,
            self.dir / "auth",
            check_token,
            self.state,
            mode=mode,
            sync_timeout_s=2.0,
            heartbeat_s=0.1,
            on_higher_epoch=self.higher.append,
        )
        self.store.replicated = self.source.wait_replicated
        # Retention and requests as run_primary wires them (xce/server/main.py).
        self.service = ControllerService(
            ControllerSettings(state_dir=self.dir),
            FileStore(self.dir / "files", 1 << 20),
            state=self.state,
            log=self.store,
        )
        self.store.purge = self.service.purge_finished
        self.port = free_port()

    async def start(self) -> None:
        await self.source.start("127.0.0.1", self.port, None)

    async def commit(self, events: list[ev.Event]) -> None:
        for e in events:
            self.state.apply(e)
            self.store.append(e)
        await self.store.sync()

    async def close(self) -> None:
        await self.source.close()
        self.store.purge = None
        await self.store.close(self.state)


def follower(root: Path, name: str = "standby", token: str = "good") -> Follower:
    folder = root / name
    folder.mkdir(mode=0o700, exist_ok=True)
    return Follower(folder, SETTINGS, EpochStore(folder), f"http://{name}", token, None)


async def follow(f: Follower, p: Primary) -> asyncio.Task[None]:
    task = asyncio.create_task(f.follow("http://primary", f"127.0.0.1:{p.port}", 5.0))
    return task


async def until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


SETUP: list[ev.Event] = [
    ev.QueueCreated(1.0, QueueRecord("normal", priority=30)),
    ev.HostRegistered(1.0, "h1", 64, 65536, ()),
]


async def test_a_standby_follows_live_and_catches_up_from_the_wal(tmp_path: Path) -> None:
    p = Primary(tmp_path)
    await p.start()
    await p.commit(SETUP + history(1, 300, 5.0))  # several 32 KiB segments on disk
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    await p.commit(history(301, 50, 6.0))  # and then live
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    assert (tmp_path / "standby" / "auth" / "keys.json").read_text() == '{"current": "k1"}'
    view = p.source.view()
    assert view[0]["node"] == "http://standby" and view[0]["in_sync"]
    await stop(task)
    await f.close()
    # The standby's own WAL, read back from disk, is the same state.
    again = follower(tmp_path)
    same(again.state, p.state)
    assert again.last_epoch == p.epochs.epoch
    await again.close()
    await p.close()


async def test_a_restarted_primary_serves_a_lagging_standby_from_its_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing in memory after a restart: every record comes back from WAL segments, in
    batches smaller than a segment (so a batch resumes where the previous one stopped)."""
    from xce.ha import backlog

    monkeypatch.setattr(backlog, "BATCH_BYTES", 2048)
    p = Primary(tmp_path)
    await p.commit(SETUP + history(1, 300, 5.0))
    await p.source.close()
    await p.store.writer.close()  # a crash: no checkpoint, the WAL stays whole
    p = Primary(tmp_path)
    await p.start()
    assert not p.source.backlog.ring
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    assert list_checkpoints(checkpoint_dir(tmp_path / "standby")) == []  # no transfer
    await stop(task)
    await f.close()
    await p.close()


async def test_a_new_standby_gets_a_checkpoint_when_the_wal_was_pruned(tmp_path: Path) -> None:
    p = Primary(tmp_path)
    await p.start()
    await p.commit(SETUP + history(1, 400, 5.0))
    await p.store.checkpoint(p.state)
    await p.commit(history(401, 10, 6.0))
    await p.store.checkpoint(p.state)  # the older checkpoint's segments are gone now
    await p.commit(history(411, 10, 6.0))
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    await stop(task)
    await f.close()
    await p.close()


async def test_a_diverged_standby_starts_over_from_the_primary(tmp_path: Path) -> None:
    """A tail written in an old term that the new primary never had is discarded."""
    p = Primary(tmp_path)
    await p.start()
    await p.commit(SETUP + history(1, 20, 5.0))
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    await stop(task)
    # The standby writes records of its own in epoch 1 (it was an old primary, say) ...
    f.store.writer.epoch = 1
    for e in [ev.JobSubmitted(9.0, 21, SPEC), ev.JobSubmitted(9.0, 22, SPEC)]:
        f.state.apply(e)
        f.store.append(e)
    await f.store.sync()
    await f.close()
    # ... while the primary started epoch 2 at the same position and wrote others.
    claim(p.epochs, p.store.writer.next_seq, at_least=1)
    p.store.writer.epoch = p.epochs.epoch
    await p.commit(history(21, 5, 7.0))
    f = follower(tmp_path)
    assert f.last_epoch == 1 and f.state.jobs["21"].submit_time == 9.0
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    # (21 finished long ago: the transfer's checkpoint purged it, on both sides)
    assert "21" not in f.state.jobs
    assert f.state.jobs["22"].submit_time == f.state.jobs["23"].submit_time == 7.0
    await stop(task)
    await f.close()
    await p.close()


async def test_retention_is_an_event_and_a_requeue_racing_a_purge_converges(tmp_path: Path) -> None:
    """Only the primary purges, by a JobsPurged record; a standby's own checkpoints drop
    nothing. A requeue and a purge of the same finished job are ordered by the primary's
    log: the job that was requeued first is not purged, one that was purged first cannot be
    requeued, and the standby ends with the primary's state either way."""
    p = Primary(tmp_path)
    await p.start()
    f = follower(tmp_path)
    task = await follow(f, p)
    await p.commit(SETUP + history(1, 30, 5.0))  # 3, 6, ..., 30 finished at t=6
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    await f.store.checkpoint(f.state)  # the standby's clock: retention is long past
    assert len(f.state.jobs) == 30 and f.store.writer.next_seq == p.store.writer.next_seq
    # requeue first, purge second (both started in the same loop turn)
    await asyncio.gather(p.service.control("3", "requeue"), p.store.checkpoint(p.state))
    assert p.state.jobs["3"].state is JobState.PEND and "6" not in p.state.jobs
    # purge first: the requeue of a purged job is refused and never replicated
    await p.commit([ev.JobStarted(7.0, "3", "h1"), ev.JobFinished(8.0, "3", 1, 0)])
    got = await asyncio.gather(
        p.store.checkpoint(p.state), p.service.control("3", "requeue"), return_exceptions=True
    )
    assert isinstance(got[1], NotFound) and "3" not in p.state.jobs
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    assert len(f.state.jobs) == 20
    await stop(task)
    await f.close()
    # what the standby wrote replays to the same state (its promotion starts from it)
    again = follower(tmp_path)
    same(again.state, p.state)
    await again.close()
    await p.close()


async def test_a_record_that_does_not_apply_on_the_standby_brings_a_checkpoint(
    tmp_path: Path,
) -> None:
    """A standby that dropped a finished job on its own (as every node did before purging
    was an event) meets the primary's requeue of it: it asks for a checkpoint transfer and
    ends with the primary's state, instead of retrying that record for ever."""
    p = Primary(tmp_path)
    await p.start()
    f = follower(tmp_path)
    task = await follow(f, p)
    await p.commit(SETUP + history(1, 12, 5.0))
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    f.state.apply(ev.JobsPurged(9.0, ("9",)))  # purged behind the log's back
    await p.commit([ev.JobRequeued(10.0, "9"), ev.JobSubmitted(10.0, 13, SPEC)])
    with pytest.raises(CannotApply):
        await asyncio.wait_for(task, 10)
    assert f.want_snapshot and "13" not in f.state.jobs  # nothing of that batch applied
    task = await follow(f, p)  # what xce/ha/node.py does after a link ends
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    assert f.state.jobs["9"].state is JobState.PEND and not f.want_snapshot
    assert list_checkpoints(checkpoint_dir(tmp_path / "standby"))  # it came by transfer
    await p.commit([ev.JobStarted(11.0, "9", "h1")])  # and it follows on from there
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    await stop(task)
    await f.close()
    await p.close()


async def test_two_different_tails_of_one_epoch_are_told_apart_by_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Same epoch, same history, same length: only the records differ (what two primaries
    of one epoch would leave). The standby must not continue on its own tail."""
    p = Primary(tmp_path)
    await p.start()
    await p.commit(SETUP + history(1, 20, 5.0))
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    await stop(task)
    f.store.writer.epoch = p.epochs.epoch  # its own records, in the primary's epoch
    for e in [ev.JobSubmitted(9.0, 21, SPEC), ev.JobSubmitted(9.0, 22, SPEC)]:
        f.state.apply(e)
        f.store.append(e)
    await f.store.sync()
    await f.close()
    await p.commit(history(21, 2, 7.0))  # the primary's records at the same positions
    await p.commit(history(23, 3, 7.5))
    f = follower(tmp_path)
    assert f.last_epoch == p.epochs.epoch and f.state.jobs["21"].submit_time == 9.0
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    # Its own job 21 is gone: the primary's (or, finished long ago, purged by the primary's
    # retention before the checkpoint it sent).
    assert "21" not in f.state.jobs or f.state.jobs["21"].submit_time == 7.0
    assert "differs in content" in caplog.text and "are discarded" in caplog.text
    await until(lambda: bool(p.source.view()) and p.source.view()[0]["in_sync"])
    await stop(task)
    await f.close()
    await p.close()


async def test_sync_mode_waits_for_the_standby_and_degrades_without_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = Primary(tmp_path, mode="sync")
    await p.start()
    await p.commit(SETUP)  # no standby: degrades at once, with an alert
    assert p.source.degraded
    assert "ALERT: sync replication degraded" in caplog.text
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: not p.source.degraded)
    for i in range(20):
        await p.commit([ev.JobSubmitted(5.0, 1 + i, SPEC)])
        assert f.durable_seq >= p.store.writer.durable_seq  # acked before commit returned
    await stop(task)
    await f.close()
    await p.close()


async def raw_connect(p: Primary) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", p.port)


async def closed_by_primary(reader: asyncio.StreamReader) -> list[protocol.Message]:
    got: list[protocol.Message] = []
    with contextlib.suppress(EOFError, protocol.ProtocolError, ConnectionError):
        while True:
            got.append(await asyncio.wait_for(protocol.read_message(reader), 5))
    return got


@pytest.mark.parametrize(
    "payload",
    [
        b"garbage that is not a frame at all....",
        struct.pack("<II", 0xFFFFFFF, 0) + b"x" * 16,  # a length far past the limit
        protocol.encode("hello", 0, {"node": "x", "token": "good"})[:-9],  # truncated
        protocol.encode("ack", 0, {"durableSeq": 5}),  # not a hello
        protocol.encode("hello", 0, {"node": "x", "token": "forged", "lastSeq": 0}),
    ],
    ids=["garbage", "huge-length", "truncated", "not-hello", "forged-token"],
)
async def test_the_primary_drops_bad_frames_and_keeps_serving(
    tmp_path: Path, payload: bytes
) -> None:
    p = Primary(tmp_path)
    await p.start()
    await p.commit(SETUP + history(1, 5, 5.0))
    reader, writer = await raw_connect(p)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    got = await closed_by_primary(reader)
    assert all(m.kind == "refuse" for m in got)
    writer.close()
    # flipped bits inside an otherwise good frame
    good = bytearray(protocol.encode("hello", 0, {"node": "y", "token": "good"}))
    good[12] ^= 0xFF
    reader, writer = await raw_connect(p)
    writer.write(bytes(good))
    await writer.drain()
    assert await closed_by_primary(reader) == []
    writer.close()
    # a real standby is still served
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    await stop(task)
    await f.close()
    await p.close()


async def test_a_hello_from_a_newer_epoch_fences_the_primary(tmp_path: Path) -> None:
    p = Primary(tmp_path)
    await p.start()
    reader, writer = await raw_connect(p)
    await protocol.send(writer, "hello", p.epochs.epoch + 3, {"node": "z", "token": "good"})
    got = await closed_by_primary(reader)
    assert got and got[0].kind == "refuse" and "stale primary" in got[0].body["text"]
    assert p.higher == [p.epochs.epoch + 3]
    writer.close()
    await p.close()


async def fake_primary(frames: list[bytes], epoch: int = 5) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await protocol.read_message(reader)  # the hello
        writer.write(
            protocol.encode(
                "welcome",
                epoch,
                {"startSeq": 1, "snapshot": False, "mode": "async", "history": [epoch, 1]},
            )
        )
        for data in frames:
            writer.write(data)
        await writer.drain()
        await asyncio.sleep(5)

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    return server, port


async def test_the_standby_refuses_corrupt_records_and_stale_epochs(tmp_path: Path) -> None:
    from xce.store.wal.framing import frame
    from xce.wire.codec import encode_entry

    good = frame(encode_entry(1, 5, SETUP[0]))
    bad = bytearray(good)
    bad[-3] ^= 0x40
    cases = [
        (
            protocol.encode("records", 5, {"firstSeq": 1, "count": 1, "data": bytes(bad)}),
            protocol.ProtocolError,
        ),
        (protocol.encode("records", 5, {"firstSeq": 7, "count": 1, "data": good}), XceError),
        (protocol.encode("records", 4, {"firstSeq": 1, "count": 1, "data": good}), XceError),
        (b"\x05\x00\x00\x00\x00\x00\x00\x00abcde\x00\x00\x00", protocol.ProtocolError),
        # a batch whose second record does not apply: the first is not kept either
        (
            protocol.encode(
                "records",
                5,
                {
                    "firstSeq": 1,
                    "count": 2,
                    "data": good + frame(encode_entry(2, 5, ev.JobStarted(1.0, "9", "h1"))),
                },
            ),
            XceError,
        ),
    ]
    for i, (data, error) in enumerate(cases):
        server, port = await fake_primary([data])
        f = follower(tmp_path, f"s{i}")
        with pytest.raises(error):
            await f.follow("http://fake", f"127.0.0.1:{port}", 3.0)
        assert f.durable_seq == 0 and not f.state.queues  # nothing applied
        assert f.store.writer.next_seq == 1  # nor logged
        await f.close()
        server.close()
