"""Queues: state (open/closed, active/inactive, in words), priority, job counts, control."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable

from xce.console.screens.base import LiveScreen

COLUMNS = ("QUEUE", "STATUS", "PRIO", "PEND", "RUN", "SUSP", "HOSTS", "DESCRIPTION")


class QueuesScreen(LiveScreen):
    CSS_PATH = "queues.tcss"
    BINDINGS = [
        Binding("o", "queue('queue.open')", "Open"),
        Binding("c", "queue('queue.close')", "Close"),
        Binding("a", "queue('queue.activate')", "Activate"),
        Binding("d", "queue('queue.deactivate')", "Deactivate"),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        table: DataTable[str] = DataTable(id="queues", cursor_type="row", zebra_stripes=False)
        for column in COLUMNS:
            table.add_column(column, key=column)
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
            if name in present:
                for column, value in zip(COLUMNS, cells, strict=True):
                    if table.get_cell(name, column) != value:
                        table.update_cell(name, column, value)
            else:
                table.add_row(*cells, key=name)

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
