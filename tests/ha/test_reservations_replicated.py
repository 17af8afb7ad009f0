"""Advance reservations reach a standby like every other change: live records, the WAL a
lagging standby catches up from, and a transferred checkpoint (which carries them as its
own packed chunk)."""

from __future__ import annotations

from pathlib import Path

from tests.ha.test_replication import SETUP, Primary, follow, follower, stop, until
from tests.store.test_checkpoint import history, same
from xce.core import events as ev
from xce.core.model import ReservationRecord

FAR = 4_000_000_000.0  # far in the future: retention never deletes these


def added(name: str, host: str, start: float) -> ev.ReservationAdded:
    return ev.ReservationAdded(
        2.0, ReservationRecord(name, (host,), start, start + 60, maintenance=True)
    )


async def test_reservations_replicate_live_and_through_a_checkpoint(tmp_path: Path) -> None:
    p = Primary(tmp_path)
    await p.start()
    await p.commit([*SETUP, added("a", "h1", FAR), *history(1, 400, 5.0)])
    await p.store.checkpoint(p.state)
    await p.commit([added("b", "h1", FAR + 100), *history(401, 10, 6.0)])
    await p.store.checkpoint(p.state)  # the first checkpoint's segments are gone now
    await p.commit([ev.ReservationDeleted(7.0, "a")])
    f = follower(tmp_path)
    task = await follow(f, p)
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    assert set(f.state.reservations) == {"b"}
    await p.commit([added("c", "h1", FAR + 200)])  # and live
    await until(lambda: f.durable_seq == p.store.writer.durable_seq)
    same(f.state, p.state)
    assert set(f.state.reservations) == {"b", "c"}
    await stop(task)
    await f.close()
    await p.close()
