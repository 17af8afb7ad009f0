"""The jobs screen: the live virtual table, sort, `/` filter, selection and job actions."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static

from xce.console.filter import FilterError, parse_filter
from xce.console.model import COLUMN_KEYS
from xce.console.screens.base import LiveScreen
from xce.console.widgets.job_table import JobTable


class JobsScreen(LiveScreen):
    CSS_PATH = "jobs.tcss"
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear", "Clear", show=False),
        Binding("o", "sort", "Sort"),
        Binding("O", "reverse", "Reverse", show=False),
        Binding("s", "job('job.suspend')", "Suspend"),
        Binding("r", "job('job.resume')", "Resume"),
        Binding("R", "job('job.requeue')", "Requeue"),
        Binding("k", "job('job.kill')", "Kill"),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        self.table = JobTable(self.tui.jobs, id="jobs")
        yield self.table
        yield Input(
            placeholder="filter: state=RUN user=alice queue:long name~sim  (Enter/Esc)", id="filter"
        )
        yield Static("", id="status")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.tui.jobs_screen = self
        self.sub_title = "Jobs"
        super().on_mount()
        self.table.focus()

    def redraw(self) -> None:
        self.refresh_bindings()
        self.table.sync()
        model = self.tui.jobs
        if model.dirty:
            self.data_changed()  # the rebuild was throttled: come back on the next tick
        arrow = "desc" if model.descending else "asc"
        parts = [
            f"{model.job_count():,} jobs",
            f"{len(model.visible):,} rows",
            f"sort {model.sort_column} {arrow}",
        ]
        if model.filter:
            parts.append(f"filter: {model.filter.text}")
        if model.selected:
            parts.append(f"{len(model.selected)} selected")
        parts.append("? help")
        self.query_one("#status", Static).update(" | ".join(parts))

    # --- actions -------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.value = self.tui.jobs.filter.text
        self.call_after_refresh(box.focus)  # focusable once the class change has applied

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            flt = parse_filter(event.value)
        except FilterError as exc:
            self.notify(str(exc), title="Filter", severity="error")
            return
        self.tui.jobs.set_filter(flt)
        self.table.cursor, self.table.cursor_key = 0, None  # a new filter starts at the top
        event.input.remove_class("-shown")
        self.table.focus()
        self.table.sync(force=True)
        self.redraw()

    def action_clear(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("-shown"):
            box.remove_class("-shown")
            self.table.focus()
            return
        model = self.tui.jobs
        if model.selected:
            model.selected.clear()
        else:
            model.set_filter(parse_filter(""))
        self.table.sync(force=True)
        self.redraw()

    def action_sort(self) -> None:
        model = self.tui.jobs
        index = (COLUMN_KEYS.index(model.sort_column) + 1) % len(COLUMN_KEYS)
        model.set_sort(COLUMN_KEYS[index], descending=False)
        self.table.sync(force=True)
        self.redraw()

    def action_reverse(self) -> None:
        model = self.tui.jobs
        model.set_sort(model.sort_column, descending=not model.descending)
        self.table.sync(force=True)
        self.redraw()

    def action_job(self, action: str) -> None:
        self.tui.offer(action, self.tui.jobs.targets(self.table.current))

    def on_job_table_opened(self, event: JobTable.Opened) -> None:
        from xce.console.screens.job_detail import JobDetailScreen

        self.app.push_screen(JobDetailScreen(event.key))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Actions the user's permissions do not grant are not offered (footer, keys)."""
        if action == "job" and parameters:
            return self.tui.access.allows(str(parameters[0]))
        return True
