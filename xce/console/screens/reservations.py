"""Advance reservations (`5`, or "Go to reservations" in the palette): what is held, where,
when and for whom. Read-only: reservations are made with `xce rsv add` (operators), so the
screen needs no confirmation dialogs; it follows the live stream's `reservation` events."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable

from xce.console import fmt
from xce.console.screens.base import LiveScreen

COLUMNS = ("RESERVATION", "STATE", "HOSTS", "SLOTS", "START", "END", "FOR", "FLAGS")


def cells(r: dict) -> tuple[str, ...]:
    """One row, in the words of `xce rsv list`."""
    return (
        r["name"],
        r["state"],
        ",".join(r["hosts"]),
        str(r.get("slots") or "all"),
        fmt.stamp(r["start"]),
        fmt.stamp(r["end"]),
        "maintenance" if r.get("maintenance") else ",".join(r.get("users") or []),
        ",".join(r.get("flags") or []) or "-",
    )


class ReservationsScreen(LiveScreen):
    CSS_PATH = "reservations.tcss"

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        table: DataTable[str] = DataTable(id="reservations", cursor_type="row", zebra_stripes=False)
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = "Reservations"
        super().on_mount()
        self.query_one(DataTable).focus()

    def redraw(self) -> None:
        """Update rows in place by name; add and drop the difference (as the queues)."""
        table = self.query_one(DataTable)
        found = self.tui.reservations
        present = {str(k.value) for k in table.rows}
        for name in present - set(found):
            table.remove_row(name)
        for name in sorted(found, key=lambda n: (found[n]["start"], n)):
            row = cells(found[name])
            if name in present:
                for column, value in zip(COLUMNS, row, strict=True):
                    if table.get_cell(name, column) != value:
                        table.update_cell(name, column, value)
            else:
                table.add_row(*row, key=name)
