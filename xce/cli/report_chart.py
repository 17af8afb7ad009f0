"""`xce report --chart` and `--csv`: the summary rows drawn in the terminal, or written for a
spreadsheet.

Over time (`--by day|month`) the core-hours and the jobs are two bar charts side by side,
drawn by plotext, whose axes and ticks read at any terminal width. Per user, group, queue
or host the rows are horizontal bars, one line per key with its figures, drawn by Rich's
`Bar`: a list of many users stays one line each and keeps its order (most core-hours
first), where a chart's tick labels would overlap. Colour only on a terminal; piped, the
same picture without escape codes.

Both are imported only for `--chart`, so `xce report` keeps its fast start. `xce simulate
--chart` draws its series with the same helpers (`series_text`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from typing import Any

FIELDS = (
    "key",
    "jobs",
    "attempts",
    "done",
    "exited",
    "core_hours",
    "cpu_hours",
    "avg_wait_s",
    "max_wait_s",
    "cpu_eff",
    "mem_eff",
)
TIME_KEYS = ("day", "month")
BAR_MAX = 40  # cells of the longest bar


def csv_text(by: str, rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV with a header line; the first column is named after `by`. Figures as
    the controller gives them (hours, seconds, fractions), empty where unknown."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([by, *FIELDS[1:]])
    for r in rows:
        writer.writerow(["" if r.get(f) is None else r.get(f) for f in FIELDS])
    return out.getvalue()


def chart_text(
    by: str, rows: Sequence[dict[str, Any]], width: int, height: int, color: bool
) -> str:
    """The picture of `rows` for a terminal `width` x `height` cells."""
    if not rows:
        return "no usage in this period\n"
    if by in TIME_KEYS:
        return _over_time(by, rows, width, height, color)
    return _bars(by, rows, width, color)


def _over_time(
    by: str, rows: Sequence[dict[str, Any]], width: int, height: int, color: bool
) -> str:
    keys = [_short(by, str(r["key"])) for r in rows]

    def bars(title: str, values: list[float]) -> Panel:
        def draw(plot: Any) -> None:
            plot.draw(plot.bar(keys, values))
            plot.title(title)

        return draw

    return side_by_side(
        [
            bars(f"core-hours per {by}", [float(r.get("core_hours") or 0) for r in rows]),
            bars(f"jobs per {by}", [float(r.get("jobs") or 0) for r in rows]),
        ],
        width,
        height,
        color,
    )


Panel = Callable[[Any], None]  # draws one plotext subplot


def side_by_side(panels: Sequence[Panel], width: int, height: int, color: bool) -> str:
    """plotext subplots in one row, each drawn by its panel, at `width` x `height` cells
    (within 40 x 10 and 30 lines), as text: what `xce report --chart` and
    `xce simulate --chart` print. plotext is imported here, only when a chart is asked."""
    import plotext  # type: ignore[import-untyped]  # no stubs; imported only for --chart

    figure = plotext.figure
    figure.clear()
    plotext.terminal.limit(False, False)  # the size asked for, not the terminal's
    figure.subplots(1, len(panels))
    for col, draw in enumerate(panels, start=1):
        draw(figure.subplot(1, col))
    figure.plot_size(max(width, 40), max(min(height, 30), 10))
    text: str = figure.build().string(colorless=not color)
    figure.clear()
    return text.rstrip("\n") + "\n"


def series_text(
    panels: Sequence[tuple[str, str, dict[str, tuple[list[float], list[float]]]]],
    width: int,
    height: int,
    color: bool,
    y_max: Sequence[float | None] = (),
) -> str:
    """Line charts side by side: each panel is (title, x-axis label, {line label: (xs,
    ys)}), one labelled line per entry; `y_max[i]`, where given, fixes panel i's y range
    to 0..y_max (a percentage reads against 100, not against its own peak)."""

    def panel(i: int, title: str, x_label: str, lines: dict[str, Any]) -> Panel:
        def draw(plot: Any) -> None:
            for label, (xs, ys) in lines.items():
                plot.draw(plot.signal(xs, ys).lines().label(label))
            plot.title(title)
            plot.label(x_label, "x")
            top = y_max[i] if i < len(y_max) else None
            if top is not None:
                plot.ruler("y").lim(0, top)

        return draw

    return side_by_side([panel(i, *p) for i, p in enumerate(panels)], width, height, color)


def _short(by: str, key: str) -> str:
    """`2026-12-01` -> `12-01` for days: the year is in the title line above."""
    return key[5:] if by == "day" and len(key) == 10 else key


def _bars(by: str, rows: Sequence[dict[str, Any]], width: int, color: bool) -> str:
    from rich.bar import Bar
    from rich.console import Console
    from rich.table import Table

    ordered = sorted(rows, key=lambda r: (-(r.get("core_hours") or 0), str(r["key"])))
    top = max(float(r.get("core_hours") or 0) for r in ordered) or 1.0
    keys = max(len(str(r["key"])) for r in ordered)
    bar_width = max(10, min(BAR_MAX, width - keys - 30))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(width=bar_width, no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_row(by.upper(), f"core-hours (longest {top:.2f})", "CORE-H", "JOBS")
    for r in ordered:
        hours = float(r.get("core_hours") or 0)
        grid.add_row(
            str(r["key"]),
            Bar(top, 0, hours, width=bar_width, color="cyan"),
            f"{hours:.2f}",
            str(r.get("jobs") or 0),
        )
    out = io.StringIO()
    console = Console(
        file=out,
        width=max(width, keys + bar_width + 30),
        color_system="standard" if color else None,
        force_terminal=color,
        highlight=False,
    )
    console.print(grid)
    return out.getvalue()
