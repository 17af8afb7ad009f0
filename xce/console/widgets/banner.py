"""`Banner`: one line saying the console is not connected (hidden while it is).

It reads the app's `connection` text, so every screen shows the same truth; the text starts
with `!` so the warning does not depend on colour.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import Static


class Banner(Static):
    DEFAULT_CSS = """
    Banner { height: 1; background: $error; color: $text; text-style: bold; display: none; }
    Banner.-shown { display: block; }
    """

    def update_from(self, app: Any) -> None:
        text = app.connection
        shown = text != "ok" and app.live
        self.set_class(shown, "-shown")
        if shown:
            self.update(f"! {text}")
