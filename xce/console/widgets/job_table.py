"""`JobTable`: a virtual table over `JobModel` — only the lines on screen are ever rendered.

A Line-API widget (ScrollView + `render_line`): its cost per frame is the number of visible
lines, not the number of jobs, and an update to one job repaints without touching the
others. The order is rebuilt at most every `REBUILD_S` seconds while changes stream in. The
cursor follows its job (by key) across rebuilds. Row 0 is the header (click a title to sort);
`*` marks selected rows and `+`/`-` collapsed/expanded arrays, so nothing relies on colour.
"""

from __future__ import annotations

import time

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from xce.console.model import COLUMNS, JobModel

REBUILD_S = 0.3
MIN_NAME = 6


class JobTable(ScrollView, can_focus=True):
    """See the module docstring."""

    COMPONENT_CLASSES = {"jobtable--header", "jobtable--cursor", "jobtable--selected"}
    DEFAULT_CSS = """
    JobTable { height: 1fr; }
    JobTable > .jobtable--header { text-style: bold reverse; }
    JobTable > .jobtable--cursor { text-style: reverse; }
    JobTable > .jobtable--selected { text-style: bold; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "move(-20)", show=False),
        Binding("pagedown", "move(20)", show=False),
        Binding("home", "move(-10000000)", show=False),
        Binding("end", "move(10000000)", show=False),
        Binding("space", "select", "Select", show=False),
        Binding("right,left,e", "expand", "Expand", show=False),
        Binding("enter", "open", "Open", show=False),
    ]

    class Opened(Message):
        """Enter on a job row (array parents toggle instead)."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(
        self,
        model: JobModel,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.model = model
        self.cursor = 0
        self.cursor_key: str | None = None
        self._last_rebuild = 0.0
        self._widths = [c.width for c in COLUMNS]

    # --- data --------------------------------------------------------------------------

    def sync(self, force: bool = False) -> None:
        """Bring the view up to date with the model (cheap when nothing moved)."""
        now = time.monotonic()
        if self.model.dirty and (force or now - self._last_rebuild >= REBUILD_S):
            self.model.rebuild()
            self._last_rebuild = now
            self._restore_cursor()
            self._resize()
        self.refresh()

    def _restore_cursor(self) -> None:
        visible = self.model.visible
        if self.cursor_key is not None:
            try:
                self.cursor = visible.index(self.cursor_key)
            except ValueError:
                self.cursor = min(self.cursor, max(len(visible) - 1, 0))
        self.cursor = min(self.cursor, max(len(visible) - 1, 0))
        self.cursor_key = visible[self.cursor] if visible else None

    def _resize(self) -> None:
        self._layout_columns()
        self.virtual_size = Size(sum(self._widths) + len(self._widths), len(self.model.visible) + 1)

    def _layout_columns(self) -> None:
        widths = [c.width for c in COLUMNS]
        name = next(i for i, c in enumerate(COLUMNS) if c.key == "name")
        others = sum(widths) - widths[name] + len(widths)
        widths[name] = max(MIN_NAME, self.size.width - others)
        self._widths = widths

    def on_resize(self) -> None:
        self._resize()

    @property
    def current(self) -> str | None:
        return self.cursor_key

    # --- rendering ---------------------------------------------------------------------

    def _line(self, cells: tuple[str, ...] | list[str]) -> str:
        return " ".join(text[:w].ljust(w) for text, w in zip(cells, self._widths, strict=True))

    def header_cells(self) -> list[str]:
        arrow = "v" if self.model.descending else "^"
        return [c.title + (arrow if c.key == self.model.sort_column else "") for c in COLUMNS]

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        total = sum(self._widths) + len(self._widths)
        if y == 0:
            style = self.get_component_rich_style("jobtable--header")
            text = self._line(self.header_cells())
        else:
            index = scroll_y + y - 1
            visible = self.model.visible
            if index >= len(visible):
                return Strip.blank(width, self.rich_style)
            key = visible[index]
            text = self._line(self.model.cells(key))
            style = self.rich_style
            if key in self.model.selected:
                style = style + self.get_component_rich_style("jobtable--selected")
            if index == self.cursor and self.has_focus:
                style = style + self.get_component_rich_style("jobtable--cursor")
            elif index == self.cursor:
                style = style + Style(underline=True)
        strip = Strip([Segment(text.ljust(total), style)], total)
        return strip.crop(scroll_x, scroll_x + width)

    # --- actions -----------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        visible = self.model.visible
        if not visible:
            return
        self.cursor = max(0, min(len(visible) - 1, self.cursor + delta))
        self.cursor_key = visible[self.cursor]
        rows = max(self.size.height - 1, 1)
        top = round(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + rows:
            self.scroll_to(y=self.cursor - rows + 1, animate=False)
        self.refresh()

    def action_select(self) -> None:
        key = self.cursor_key
        if key is None:
            return
        selected = self.model.selected
        if key in selected:
            selected.discard(key)
        else:
            selected.add(key)
        self.action_move(1)

    def action_expand(self) -> None:
        key = self.cursor_key
        if key is None:
            return
        if not key.startswith("@"):
            row = self.model.rows.get(key)
            if row is None or row.get("array_id") is None:
                return
            key = f"@{row['array_id']}"
            self.cursor_key = key
        self.model.toggle(key)
        self.sync(force=True)

    def action_open(self) -> None:
        key = self.cursor_key
        if key is None:
            return
        if key.startswith("@"):
            self.action_expand()
        else:
            self.post_message(self.Opened(key))

    def on_click(self, event: Click) -> None:
        x = event.x + round(self.scroll_offset.x)
        if event.y == 0:
            edge = 0
            for column, w in zip(COLUMNS, self._widths, strict=True):
                edge += w + 1
                if x < edge:
                    self.model.set_sort(column.key)
                    self.sync(force=True)
                    return
            return
        index = round(self.scroll_offset.y) + event.y - 1
        if 0 <= index < len(self.model.visible):
            self.cursor = index
            self.cursor_key = self.model.visible[index]
            self.refresh()
            if event.chain == 2:
                self.action_open()
