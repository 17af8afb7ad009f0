"""Queues: state (open/closed, active/inactive, in words), priority, job counts with a
running and a pending bar (each against the largest queue's, so the queue that waits most
stands out), control."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable

from xce.console.screens.base import LiveScreen
from xce.console.widgets.bars import UseCells, header, use_bars

COLUMNS = ("QUEUE", "STATUS", "PRIO", "PEND", "RUN", "SUSP", "HOSTS", "DESCRIPTION")
USE = "USE"  # the bars' column, after SUSP
USE_AFTER = COLUMNS.index("SUSP") + 1


def queue_use(q: dict[str, Any], top_running: int, top_pending: int) -> UseCells:
    """(running, most running of any queue), (pending, most pending): the bars' figures."""
    return ((q["running"], max(top_running, 1)), (q["pending"], max(top_pending, 1)))


class QueuesScreen(LiveScreen):
    CSS_PATH = "queues.tcss"
    BINDINGS = [
        Binding("o", "queue('queue.open')", "Open"),
        Binding("c", "queue('queue.close')", "Close"),
        Binding("a", "queue('queue.activate')", "Activate"),
        Binding("d", "queue('queue.deactivate')", "Deactivate"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._use: dict[str, UseCells] = {}  # the figures each row's bars show

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        table: DataTable[Any] = DataTable(id="queues", cursor_type="row", zebra_stripes=False)
        for column in (*COLUMNS[:USE_AFTER], USE, *COLUMNS[USE_AFTER:]):
            label = header("run", "pend") if column == USE else column
            table.add_column(label, key=column)
        yield table
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = "Queues"
        super().on_mount()
        self.query_one(DataTable).focus()

    def redraw(self) -> None:
        """Update rows in place by stable key (queue name); add and drop the difference."""
        self.refresh_bindings()
        table = self.query_one(DataTable)
        queues = self.tui.queues
        present = {str(k.value) for k in table.rows}
        for name in present - set(queues):
            table.remove_row(name)
            self._use.pop(name, None)
        top_running = max((q["running"] for q in queues.values()), default=0)
        top_pending = max((q["pending"] for q in queues.values()), default=0)
        for name in sorted(queues, key=lambda n: (-queues[n]["priority"], n)):
            q = queues[name]
            cells = (
                name,
                q["status"],
                str(q["priority"]),
                str(q["pending"]),
                str(q["running"]),
                str(q["suspended"]),
                ",".join(q.get("hosts") or []) or "all",
                q.get("description") or "",
            )
            use = queue_use(q, top_running, top_pending)
            if name in present:
                for column, value in zip(COLUMNS, cells, strict=True):
                    if table.get_cell(name, column) != value:
                        table.update_cell(name, column, value)
                if self._use.get(name) != use:
                    table.update_cell(name, USE, use_bars(use))
            else:
                table.add_row(*cells[:USE_AFTER], use_bars(use), *cells[USE_AFTER:], key=name)
            self._use[name] = use

    def _current(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_queue(self, action: str) -> None:
        name = self._current()
        self.tui.offer(action, [name] if name else [])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "queue" and parameters:
            return self.tui.access.allows(str(parameters[0]))
        return True
