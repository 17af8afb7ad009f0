"""The Cluster screen with high availability: candidates, mode, standbys' lag, switchover.

Screenshots use the fixed sample data plus an `ha` part (no network); the live test drives
the console against two real controller candidates and hands the primary role over.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.integration.cluster import ADMIN_TOKEN
from tests.integration.ha_cluster import HaCluster
from tests.tui.helpers import footer_keys, notifications, screen_text, until
from tests.tui.sample import sample_app
from xce.console.app import XceTui
from xce.console.perms import Access
from xce.console.screens.cluster import ClusterScreen
from xce.console.screens.confirm import ConfirmScreen

A, B, C = "http://127.0.0.1:6820", "http://127.0.0.2:6820", "https://ctl-c.example.org:6820"


def ha_part(degraded: bool = False, third: bool = False) -> dict[str, Any]:
    candidates = [
        {
            "url": A,
            "rank": 0,
            "reachable": True,
            "role": "primary",
            "epoch": 4,
            "seq": 1234,
            "primary": A,
            "error": None,
            "self": True,
            "lag_records": 0,
        },
        {
            "url": B,
            "rank": 1,
            "reachable": True,
            "role": "standby",
            "epoch": 4,
            "seq": 1230,
            "primary": A,
            "error": None,
            "self": False,
            "lag_records": 4,
        },
    ]
    if third:
        candidates.append(
            {
                "url": C,
                "rank": 2,
                "reachable": False,
                "role": None,
                "epoch": 0,
                "seq": 0,
                "primary": None,
                "self": False,
                "lag_records": None,
                "error": "Cannot connect to host ctl-c.example.org:6820",
            }
        )
    return {
        "epoch": 4,
        "role": "primary",
        "rank": 0,
        "mode": "sync",
        "degraded": degraded,
        "failover_timeout_s": 5.0,
        "candidates": candidates,
        "standbys": [
            {
                "node": B,
                "peer": "127.0.0.2:40000",
                "acked_seq": 1230,
                "lag_records": 4,
                "in_sync": not degraded,
                "last_ack_s": 0.12,
                "connected_at": 1_789_990_000.0,
            }
        ],
        "history": [[1, 1], [4, 900]],
    }


def ha_app(**kw: bool) -> XceTui:
    app = sample_app()
    app.cluster_info["ha"] = ha_part(**kw)
    return app


async def _cluster_screen(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("4")
    await pilot.pause(0.4)  # one redraw tick


@pytest.mark.parametrize("degraded", [False, True], ids=["healthy", "degraded"])
def test_cluster_screen_snapshot(degraded: bool, snap_compare: Callable[..., bool]) -> None:
    run_before: Callable[[Pilot[Any]], Awaitable[None]] = _cluster_screen
    assert snap_compare(
        ha_app(degraded=degraded, third=degraded), terminal_size=(80, 24), run_before=run_before
    )


async def test_candidates_mode_and_lag_fit_80x24() -> None:
    app = ha_app(degraded=True, third=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await _cluster_screen(pilot)
        text = screen_text(pilot)
        assert "primary: http://127.0.0.1:6820 (epoch 4)" in text
        assert "replication: sync, DEGRADED (running async); failover after 5 s" in text
        assert "standbys: http://127.0.0.2:6820 lag 4 records, catching up" in text
        assert f"unreachable: {C}: Cannot connect" in text
        rows = {
            line.split()[0]: line.split()[1:4]
            for line in text.splitlines()
            if line.strip().startswith(("http://", "https://"))
        }
        assert rows[A] == ["0", "primary", "4"] and rows[B] == ["1", "standby", "4"]
        assert rows[C] == ["2", "-", "-"]  # unreachable: no zeros from the last probe
        assert "Switchover" in footer_keys(pilot)


async def test_switchover_asks_first_naming_both_and_needs_cluster_admin() -> None:
    app = ha_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _cluster_screen(pilot)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"Hand the primary role from {A} to {B}?" in app.screen.text
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)

    viewer = ha_app()
    viewer.access = Access("alice", ("user",), frozenset({"cluster:view", "job:view:all"}))
    async with viewer.run_test(size=(80, 24)) as pilot:
        await _cluster_screen(pilot)
        assert "Switchover" not in footer_keys(pilot)
        await pilot.press("s")
        assert not isinstance(viewer.screen, ConfirmScreen)


async def test_without_ha_the_configured_controllers_are_listed() -> None:
    app = sample_app()  # a controller that reports no `ha` part
    async with app.run_test(size=(80, 24)) as pilot:
        await _cluster_screen(pilot)
        text = screen_text(pilot)
        assert "replication: not reported by this controller" in text
        assert any(li.split()[:3] == [A, "0", "primary"] for li in text.splitlines())
        assert any(li.split() == [B, "1", "-", "-", "-", "-", "-"] for li in text.splitlines())
        await pilot.press("s")  # no standby known: a warning, no dialog
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("nothing to switch over to" in n for n in notifications(pilot))


# --- against two real candidates ------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HaCluster]:
    ha = HaCluster(tmp_path / "ha")
    try:
        ha.start_pair()
        ha.wait_for(
            lambda: any(
                s["in_sync"] for s in ha.request("GET", "/api/v1/cluster")["ha"]["standbys"]
            ),
            20,
            "the standby in sync",
        )
        yield ha
    finally:
        ha.stop()


def _roles_on_screen(pilot: Pilot[Any], urls: list[str]) -> list[str | None]:
    found: dict[str, str] = {}
    for line in screen_text(pilot).splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] in urls:
            found[words[0]] = words[2]
    return [found.get(u) for u in urls]


async def test_live_cluster_screen_lists_both_candidates_and_switches_over(pair: HaCluster) -> None:
    first, second = pair.candidate_urls
    app = XceTui(list(pair.candidate_urls), ADMIN_TOKEN)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected")
        await pilot.press("4")
        await until(
            pilot,
            lambda: _roles_on_screen(pilot, [first, second]) == ["primary", "standby"],
            "both candidates with their roles",
        )
        assert f"primary: {first}" in screen_text(pilot)
        await until(
            pilot, lambda: f"standbys: {second} lag" in screen_text(pilot), "the standby's lag"
        )
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"from {first} to {second}?" in app.screen.text
        await pilot.press("y")
        await until(
            pilot,
            lambda: any(
                n.startswith(f"Switchover done: Primary role moved from {first} to {second}")
                for n in notifications(pilot)
            ),
            "the switchover done",
        )
        assert pair.primary() == 1
        await until(
            pilot,
            lambda: _roles_on_screen(pilot, [first, second]) == ["standby", "primary"],
            "the roles swapped on screen",
            timeout=30,
        )
        assert f"primary: {second}" in screen_text(pilot)


async def test_with_no_primary_the_screen_shows_the_candidates_health(tmp_path: Path) -> None:
    ha = HaCluster(tmp_path / "ha", failover_timeout=120)  # a lone standby: no primary
    try:
        ha.start_candidate(1, role="standby")
        first, second = ha.candidate_urls
        app = XceTui(list(ha.candidate_urls), ADMIN_TOKEN)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("4")
            await until(
                pilot,
                lambda: "no primary answers the API" in screen_text(pilot),
                "the /healthz view",
            )
            assert _roles_on_screen(pilot, [first, second]) == ["-", "standby"]
            text = screen_text(pilot)
            assert "primary: none answering" in text and f"unreachable: {first}: " in text
            assert "! connection lost" in text  # the banner says the stream is gone too
            await pilot.press("s")
            assert not isinstance(app.screen, ConfirmScreen)
            assert any(
                "no primary answers: nothing to switch over to" in n for n in notifications(pilot)
            )
    finally:
        ha.stop()
