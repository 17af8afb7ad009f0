"""`LiveScreen`: header, connection banner, body and key footer, redrawn when data changes.

`data_changed` (called by the app for every applied change) only sets a flag; a timer
repaints at most `REDRAW_S` times a second, so a burst of stream events costs one redraw.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header

from xce.console.widgets.banner import Banner

REDRAW_S = 0.25


class LiveScreen(Screen[None]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dirty = True

    def compose_frame(self) -> ComposeResult:
        yield Header(icon="")
        yield Banner()

    def compose_footer(self) -> ComposeResult:
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REDRAW_S, self._tick)
        self.redraw()

    def on_screen_resume(self) -> None:
        self._dirty = True
        self._tick()

    def data_changed(self) -> None:
        self._dirty = True

    def _tick(self) -> None:
        if not self._dirty or not self.is_attached:
            return
        self._dirty = False
        self.query_one(Banner).update_from(self.app)
        self.redraw()

    def redraw(self) -> None:
        """Repaint from the app's data; screens override."""

    @property
    def tui(self) -> Any:
        return self.app
