"""`HelpScreen` (`?`): the keys of the screen it was opened from, the filter syntax, and how
to reach every action through the command palette."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from xce.console import filter as job_filter

GLOBAL = """\
Everywhere: 1 jobs  2 queues  3 hosts  4 cluster  ? help  ctrl+p command palette  q quit
Tables: arrows move, Enter opens, mouse optional (click a header to sort).
Markers: * selected row, +/- collapsed/expanded array, ! connection problem."""


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, origin: Screen[object]) -> None:
        super().__init__()
        self.origin = origin

    def compose(self) -> ComposeResult:
        keys = []
        for binding in self.origin.BINDINGS:
            if isinstance(binding, Binding) and binding.description:
                shown = binding.key_display or self.app.get_key_display(binding)
                keys.append(f"  {shown:<12} {binding.description}")
        title = type(self.origin).__name__.removesuffix("Screen")
        body = [f"{title} keys:", *keys, "", GLOBAL]
        if title == "Jobs":
            body += ["", "Filter (/):", job_filter.__doc__.split("\n\n")[1]]
        with VerticalScroll(id="help"):
            yield Static("\n".join(body), markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
