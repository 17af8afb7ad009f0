"""Heartbeats at scale: the interval a large cluster tells its workers, the deadline that
follows it, liveness counted in heartbeats heard (a busy controller marks nobody down), and
an unchanged heartbeat that writes nothing to the WAL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Api, Clock, clocked_api, make_settings

T0 = 1_000_000.0
INTERVAL = 5.0
MISSED = 3
FENCE = 30.0
RATE = 2.0  # heartbeats a second planned for: 10 hosts or fewer keep the 5 s interval


@pytest.fixture
async def ctl(tmp_path: Path) -> AsyncIterator[tuple[Api, Clock]]:
    settings = make_settings(
        tmp_path,
        heartbeat_interval_s=INTERVAL,
        missed_heartbeats=MISSED,
        fence_timeout_s=FENCE,
        max_heartbeats_per_s=RATE,
    )
    async with clocked_api(tmp_path, settings) as running:
        yield running


async def _beat(api: Api, host: str, **body: Any) -> Any:
    return await api.call("POST", f"/api/v1/workers/{host}/heartbeat", 200, json=body)


async def test_a_small_cluster_keeps_the_configured_interval(ctl) -> None:
    api, _ = ctl
    answer = await api.register("w1")
    assert answer["heartbeat_interval_s"] == INTERVAL
    assert (await _beat(api, "w1"))["heartbeat_interval_s"] == INTERVAL
    assert api.gateway.heartbeat_deadline_s == INTERVAL * MISSED


async def test_a_large_cluster_asks_for_a_longer_interval_up_to_the_fence(ctl) -> None:
    api, _ = ctl
    for i in range(14):  # 14 hosts at 2 a second: 7 s
        await api.register(f"h{i:02d}")
    assert (await _beat(api, "h00"))["heartbeat_interval_s"] == 14 / RATE
    assert api.gateway.heartbeat_deadline_s == 14 / RATE * MISSED
    for i in range(14, 40):  # 40 / 2 = 20 s, but at most fence / (missed + 1) = 7.5 s
        await api.register(f"h{i:02d}")
    ceiling = FENCE / (MISSED + 1)
    assert (await _beat(api, "h00"))["heartbeat_interval_s"] == ceiling
    # the deadline stays a whole interval short of the fence
    assert api.gateway.heartbeat_deadline_s == ceiling * MISSED <= FENCE - ceiling


async def test_a_controller_that_heard_nobody_marks_nobody_unavailable(ctl) -> None:
    """Every host silent past the deadline while the controller heard no one (its loop
    was busy, their heartbeats queued): none is marked, until deadline + fence."""
    api, clock = ctl
    for host in ("a", "b", "c"):
        await api.register(host)
    clock.now = T0 + INTERVAL * MISSED + 1
    assert await api.gateway.check_liveness() == []
    clock.now = T0 + INTERVAL * MISSED + FENCE + 1  # past the fence: gone whatever the count
    changed = await api.gateway.check_liveness()
    assert sorted(changed) == [("a", "unavailable"), ("b", "unavailable"), ("c", "unavailable")]


async def test_a_host_silent_while_the_others_talk_goes_after_their_rounds(ctl) -> None:
    api, clock = ctl
    for host in ("a", "b", "c"):
        await api.register(host)
    clock.now = T0 + INTERVAL
    await _beat(api, "a")
    await _beat(api, "b")
    # "c" is past the wall deadline, but one round of the others was heard since: the
    # controller cannot tell a dead host from its own backlog yet
    clock.now = T0 + INTERVAL * MISSED + 1
    assert await api.gateway.check_liveness() == []
    await _beat(api, "a")
    await _beat(api, "b")  # MISSED - 1 rounds heard since "c" was: it is the silent one
    clock.now += 0.5
    assert await api.gateway.check_liveness() == [("c", "unavailable")]
    hosts = {h["name"]: h["status"] for h in (await api.call("GET", "/api/v1/hosts", 200))["hosts"]}
    assert hosts == {"a": "online", "b": "online", "c": "unavailable"}


async def test_most_of_the_cluster_cut_off_at_once_goes_at_the_deadline(ctl) -> None:
    """Eight of ten hosts go silent together (a switch): the two still heard are the
    rounds counted, so the eight go at the deadline, not at deadline + fence."""
    api, clock = ctl
    hosts = [f"h{i}" for i in range(10)]
    for host in hosts:
        await api.register(host)
    for beat in range(1, MISSED + 1):
        clock.now = T0 + INTERVAL * beat
        await _beat(api, "h0")
        await _beat(api, "h1")
    clock.now = T0 + INTERVAL * MISSED + 1
    changed = await api.gateway.check_liveness()
    assert sorted(changed) == [(h, "unavailable") for h in hosts[2:]]


async def test_the_only_host_goes_at_the_deadline(ctl) -> None:
    api, clock = ctl
    await api.register("lone")
    clock.now = T0 + INTERVAL * MISSED - 1
    assert await api.gateway.check_liveness() == []
    clock.now = T0 + INTERVAL * MISSED + 1
    assert await api.gateway.check_liveness() == [("lone", "unavailable")]


async def test_an_unchanged_heartbeat_writes_nothing_to_the_wal(ctl) -> None:
    api, clock = ctl
    await api.register("w1")
    await api.service.log.sync()
    applied = api.service.state.applied
    for _ in range(5):
        clock.now += 1
        await _beat(api, "w1", load={"load1": 0.5})
    assert api.service.state.applied == applied
    assert api.gateway.heard["w1"] == clock.now  # heard all the same
