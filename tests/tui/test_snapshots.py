"""Screenshots of every screen at 80x24 and 160x48, compared with the committed SVGs.

Fixed data (tests/tui/sample.py), no clock text, no network, cursor blink off. After an
intended change to a screen: `pytest tests/tui/test_snapshots.py --snapshot-update`, then look
at the new files under __snapshots__ before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from tests.tui.sample import sample_app

SIZES = [(80, 24), (160, 48)]


def _steady(pilot: Pilot[Any]) -> None:
    for box in pilot.app.screen.query(Input):
        box.cursor_blink = False


def _before(
    *keys: str, setup: Callable[[Any], None] | None = None
) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run(pilot: Pilot[Any]) -> None:
        if setup is not None:
            setup(pilot.app)
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause(0.4)  # one redraw tick
        _steady(pilot)
        await pilot.pause()

    return run


SAMPLE_OUTPUT = "".join(
    f"epoch {n:>2}  loss {1 / n:.4f}  \x1b[32mok\x1b[0m\n" for n in range(1, 31)
)


async def _detail(pilot: Pilot[Any]) -> None:
    """The detail of a running job, its tail pane holding what one answer brought."""
    from xce.console.screens.job_detail import JobDetailScreen

    screen = JobDetailScreen("101")
    pilot.app.push_screen(screen)
    await pilot.pause()
    end = len(SAMPLE_OUTPUT.encode())
    screen._append(
        {
            "attempt": 1,
            "state": "RUN",
            "running": True,
            "truncated": False,
            "offset": 0,
            "next_offset": end,
            "end": end,
            "data": SAMPLE_OUTPUT,
        }
    )
    screen.data_changed()
    await pilot.pause(0.4)  # one redraw tick


def _login(app: Any) -> None:
    from xce.console.screens.login import LoginScreen

    app.push_screen(LoginScreen(app.controllers))


SCREENS: dict[str, Callable[[Pilot[Any]], Awaitable[None]]] = {
    "jobs": _before(),
    "jobs_expanded_sorted": _before("end", "e", "o", "o", "o", "o", "o", "o", "o", "o", "O"),
    "jobs_filter": _before("slash", *"state=RUN", "enter"),
    "job_detail": _detail,
    "confirm_kill": _before("space", "down", "space", "k"),
    "help": _before("question_mark"),
    "queues": _before("2"),
    "hosts": _before("3"),
    "hosts_topology": _before("3", "t"),
    "cluster": _before("4"),
    "reservations": _before("5"),
    "login": _before(setup=_login),
}


# Every screen at both sizes; the variants of a screen (dialogs, filter, tree) at 80x24.
CASES = [
    (name, size)
    for name in ("jobs", "job_detail", "queues", "hosts", "cluster", "login")
    for size in SIZES
] + [
    (name, SIZES[0])
    for name in (
        "jobs_expanded_sorted",
        "jobs_filter",
        "confirm_kill",
        "help",
        "hosts_topology",
        "reservations",
    )
]


@pytest.mark.parametrize("screen, size", CASES, ids=[f"{n}-{w}x{h}" for n, (w, h) in CASES])
def test_screen_snapshot(screen: str, size: tuple[int, int], snap_compare: Any) -> None:
    assert snap_compare(sample_app(), terminal_size=size, run_before=SCREENS[screen])
