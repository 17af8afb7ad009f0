"""Shared helpers for console tests: wait on the app, read what the screen shows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from textual.pilot import Pilot


async def until(
    pilot: Pilot[object], predicate: Callable[[], object], what: str, timeout: float = 20.0
) -> None:
    """Let the app run until `predicate()` holds; fail naming `what` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def screen_text(pilot: Pilot[object]) -> str:
    """The characters on screen now, line by line (no styles)."""
    app = pilot.app
    height = app.size.height
    lines = []
    for strip in app.screen._compositor.render_strips():  # type: ignore[attr-defined]
        lines.append("".join(segment.text for segment in strip))
    return "\n".join(lines[:height])


def notifications(pilot: Pilot[object]) -> list[str]:
    return [f"{n.title}: {n.message}" for n in pilot.app._notifications]  # type: ignore[attr-defined]


def footer_keys(pilot: Pilot[object]) -> list[str]:
    """The descriptions the footer shows now."""
    from textual.widgets._footer import FooterKey

    return [key.description for key in pilot.app.screen.query(FooterKey)]
