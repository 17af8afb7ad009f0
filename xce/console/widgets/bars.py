"""Use bars for table cells: Rich's `Bar` (a block bar with eighth-cell ends), a few cells
wide, one per resource, so a table of thousands of rows shows which hosts and queues are
full at a glance, in one line per row, in colour or without it.

A cell holds plain figures (`UseCells`), compared before anything is drawn: a table updates
a cell only when its figures changed, as it does for text cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.bar import Bar
from rich.table import Table
from rich.text import Text

WIDTH = 5  # cells per bar
# (used, total) per bar; None: the resource is not there (a host without GPUs)
UseCells = tuple[tuple[float, float] | None, ...]


def header(*names: str) -> str:
    """A column header whose names sit over the bars of `use_bars`."""
    return " ".join(name[:WIDTH].ljust(WIDTH) for name in names)


def use_bars(parts: Sequence[tuple[float, float] | None]) -> Table:
    """One bar per (used, total), WIDTH cells each, one space apart; `-` where None."""
    grid = Table.grid(padding=(0, 1, 0, 0))
    for _ in parts:
        grid.add_column(width=WIDTH, no_wrap=True)
    cells: list[Bar | Text] = []
    for part in parts:
        if part is None or part[1] <= 0:
            cells.append(Text("-".center(WIDTH)))
        else:
            used, total = part
            full = used >= total
            cells.append(
                Bar(
                    total,
                    0,
                    min(max(used, 0), total),
                    width=WIDTH,
                    color="red" if full else "green",
                    bgcolor="grey27",
                )
            )
    grid.add_row(*cells)
    return grid
