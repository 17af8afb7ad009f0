"""The console's reservations screen against a real controller and worker: a reservation
made with the API appears (live stream `reservation` events) and goes when deleted; a user
sees it too (host:view)."""

from __future__ import annotations

import time

from tests.integration.cluster import USER_TOKEN, Cluster
from tests.tui.helpers import screen_text, until
from xce.console.app import XceTui


async def test_reservations_appear_and_go_live(cluster: Cluster) -> None:
    host = cluster.get("/api/v1/hosts")["hosts"][0]["name"]
    app = XceTui([cluster.url], USER_TOKEN)
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected")
        await pilot.press("5")
        cluster.post(
            "/api/v1/reservations",
            {
                "name": "window",
                "hosts": [host],
                "start": time.time() + 3600,
                "duration_s": 600,
                "maintenance": True,
            },
        )
        await until(pilot, lambda: "window" in app.reservations, "the stream's event")
        await until(
            pilot,
            lambda: "window" in screen_text(pilot) and "maintenance" in screen_text(pilot),
            "the row on screen",
        )
        cluster.request("DELETE", "/api/v1/reservations/window")
        await until(pilot, lambda: "window" not in app.reservations, "the deletion")
        await until(pilot, lambda: "window" not in screen_text(pilot), "the row gone")
