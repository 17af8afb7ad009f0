"""Async replication's lag bound (xce/ha/lagbound.py): on a fake clock, and on a real
primary and standby in-process (xce/ha/acks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ha.test_replication import SETUP, SPEC, Primary, follow, follower, stop, until
from xce.core import events as ev
from xce.ha.lagbound import LagBound


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_the_record_limit_names_the_record_a_standby_must_hold() -> None:
    bound = LagBound(100, 0)
    assert bound.needed(150, held=20) == 50
    assert bound.needed(150, held=60) <= 60  # within the bound: acknowledge now
    assert bound.needed(40, held=0) <= 0


def test_the_time_limit_waits_for_every_record_older_than_it() -> None:
    clock = Clock()
    bound = LagBound(0, 500, clock)
    bound.durable(10)
    clock.now += 0.3
    bound.durable(20)
    assert bound.needed(20, held=5) <= 5  # nothing is older than 0.5 s yet
    clock.now += 0.3
    assert bound.needed(20, held=5) == 10  # records up to 10 are 0.6 s old
    clock.now += 0.3
    assert bound.needed(20, held=5) == 20
    assert bound.needed(20, held=20) <= 20


def test_both_limits_off_is_plain_async() -> None:
    bound = LagBound(0, 0)
    assert not bound.enabled
    bound.durable(1000)
    assert bound.needed(1000, held=0) <= 0


async def test_async_commits_return_only_within_the_bound_and_lift_it_without_a_standby(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = Primary(tmp_path, mode="async")
    p.source.shared.bound = LagBound(1, 0)
    await p.start()
    f = follower(tmp_path)
    task = await follow(f, p)
    await p.commit(SETUP)
    await until(lambda: any(s.in_sync for s in p.source.sessions.values()))
    n = 1
    for _ in range(20):  # batches of ten: without the bound the standby trails by ten
        await p.commit([ev.JobSubmitted(5.0, n + i, SPEC) for i in range(10)])
        n += 10
        assert p.store.writer.durable_seq - f.durable_seq <= 1
    assert not p.source.degraded
    await stop(task)
    await until(lambda: not p.source.sessions)
    await p.commit([ev.JobSubmitted(5.0, n, SPEC)])  # no standby: served, with an alert
    assert p.source.degraded and "ALERT: async replication's lag bound is lifted" in caplog.text
    task = await follow(f, p)
    await until(lambda: not p.source.degraded)  # caught up again: the bound is back
    await p.commit([ev.JobSubmitted(5.0, n + 1 + i, SPEC) for i in range(10)])
    assert p.store.writer.durable_seq - f.durable_seq <= 1
    await stop(task)
    await f.close()
    await p.close()
