"""Cluster: the controller candidates (role, epoch, log position, lag, reachable), which one
is primary, the replication mode and whether it is degraded, the standbys' lag; counts and
scheduler statistics; the cluster's shape over the last hour (`d`: the last 24 h, `h`: back)
as charts (xce/console/widgets/charts.py). `s` hands the primary role to a standby
(switchover, cluster:admin).

The data is `GET /api/v1/cluster` (its `ha` part), re-read every `POLL_S` while this screen
is shown, since lag and reachability change without stream events. When no primary answers
the API (a failover in progress) the candidates' public `/healthz` answers are shown
instead, so the screen says who is up while the banner says the stream is lost. The view is
built by the same code as `xce cluster status` (xce/client/cluster_view.py).

The charts read `GET /api/v1/cluster/history` when the screen is shown, every
`HISTORY_POLL_S` while it stays shown and when the window changes; between two reads their
last point is the figures the event stream keeps current. A controller that does not answer
it (no history, or no `cluster:view`) leaves them hidden, with their keys.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from xce.client import ApiError
from xce.client.cluster_view import (
    probe_candidates,
    summary_lines,
    unreachable_lines,
    view_from_cluster,
)
from xce.console.screens.base import LiveScreen
from xce.console.widgets.charts import HistoryCharts, history_path, live_point

POLL_S = 2.0
HISTORY_POLL_S = 15.0
SWITCHOVER_PERMISSION = "cluster:admin"
COLUMNS = ("URL", "RANK", "ROLE", "EPOCH", "SEQ", "LAG", "REACHABLE")


def _shown(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def candidate_cells(c: dict[str, Any]) -> tuple[str, ...]:
    return (
        c["url"],
        _shown(c["rank"]),
        _shown(c["role"]),
        _shown(c["epoch"]),
        _shown(c["seq"]),
        _shown(c["lag_records"]),
        "-" if c["reachable"] is None else "yes" if c["reachable"] else "no",
    )


def info_text(info: dict[str, Any], access: Any) -> str:
    """Below the candidates: counts, scheduler statistics, who you are."""
    lines = [
        "Counts",
        f"  jobs {info.get('jobs', '-')}  arrays {info.get('arrays', '-')}  pending "
        f"{info.get('pending', '-')}  hosts {info.get('hosts', '-')}  events applied "
        f"{info.get('events_applied', '-')}",
        "",
        "Scheduler",
    ]
    for key, value in sorted((info.get("scheduler") or {}).items()):
        shown = f"{value:.1f}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<28}  {shown}")
    lines += [
        "",
        f"Controller version {info.get('version', '-')}",
        f"You: {access.user}  permissions: {access.source}",
    ]
    return "\n".join(lines)


def switchover_text(primary: str | None, target: str | None) -> str:
    """The dialog: who hands over to whom, and what happens meanwhile."""
    source = primary or "the primary"
    head = (
        f"Hand the primary role from {source} to {target}?"
        if target
        else f"Hand the primary role from {source} to a caught-up standby?"
    )
    return (
        f"{head}\nWrites pause until the standby holds every record; it then serves in a "
        f"new epoch and {source} follows it as a standby. Clients move by themselves."
    )


class ClusterScreen(LiveScreen):
    CSS_PATH = "cluster.tcss"
    BINDINGS = [
        Binding("s", "switchover", "Switchover"),
        Binding("d", "window('day')", "Last 24 h"),
        Binding("h", "window('hour')", "Last hour"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.health_view: dict[str, Any] | None = None  # set while no primary answers
        self.history: dict[str, Any] | None = None  # the last history answer, if any
        self.window = "hour"
        self.ring_step: int | None = None  # the controller's history_step_s, once known

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        yield Static(id="ha-summary", markup=False)
        table: DataTable[str] = DataTable(id="candidates", cursor_type="row")
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield Static(id="standbys", markup=False)
        yield HistoryCharts(id="charts")
        with VerticalScroll(id="cluster"):
            yield Static(id="info", markup=False)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = "Cluster"
        super().on_mount()
        self.query_one(DataTable).focus()
        self.set_interval(POLL_S, self._poll)
        self.set_interval(HISTORY_POLL_S, self._poll_history)

    def on_screen_resume(self) -> None:
        """Shown (the first time too): read the history now, not at the next interval."""
        super().on_screen_resume()
        self._poll_history()

    # --- data ------------------------------------------------------------------------------

    @property
    def view(self) -> dict[str, Any]:
        app = self.tui
        if self.health_view is not None:
            return self.health_view
        return view_from_cluster(
            app.cluster_info, app.client.base_url, list(app.client.controllers)
        )

    def _poll(self) -> None:
        if self.tui.live and self.is_current:
            self.run_worker(self.refresh_cluster(), group="cluster-poll", exclusive=True)

    async def refresh_cluster(self) -> None:
        client = self.tui.client
        try:
            self.tui.cluster_info = await client.cluster()
            self.health_view = None
        except ApiError as exc:
            if exc.status != 0:
                return
            self.health_view = await probe_candidates(client)
        self.data_changed()

    def _poll_history(self) -> None:
        if self.tui.live and self.is_current:
            self.refresh_history()

    @work(group="history-poll", exclusive=True)
    async def refresh_history(self) -> None:
        """One read of the history for the window shown; an error keeps what was drawn
        (a controller without the route, or a failover in progress)."""
        window = self.window
        try:
            answer = await self.tui.client.request("GET", history_path(window, self.ring_step))
        except ApiError:
            return
        if window == "hour":
            self.ring_step = int(answer.get("step_s") or 0) or None
        if window == self.window:
            self.show_history(answer)

    def show_history(self, answer: dict[str, Any]) -> None:
        """Draw `answer` (a history answer for the window shown) from the next redraw on."""
        self.history = answer
        self.data_changed()

    def action_window(self, window: str) -> None:
        if window != self.window:
            self.window = window
            self.refresh_bindings()
            self._poll_history()

    # --- drawing ---------------------------------------------------------------------------

    def redraw(self) -> None:
        self.refresh_bindings()
        view = self.view
        lines = summary_lines(view)
        standbys = [li for li in lines if li.startswith("standbys:")]
        summary = self.query_one("#ha-summary", Static)
        if not self.tui.cluster_info and self.health_view is None:
            lines, standbys = ["waiting for the cluster status..."], []
        summary.update("\n".join(li for li in lines if li not in standbys))
        alarm = (
            bool(view.get("degraded"))
            or view["source"] == "healthz"
            or (bool(self.tui.cluster_info) and view.get("primary") is None)
        )
        summary.set_class(alarm, "-degraded")
        width = max(self.size.width - 2, 40)
        below = "\n".join(standbys + unreachable_lines(view, width=width))
        box = self.query_one("#standbys", Static)
        box.update(below)
        box.display = bool(below)
        self._fill_table(view["candidates"])
        self._draw_charts()
        self.query_one("#info", Static).update(info_text(self.tui.cluster_info, self.tui.access))

    def _draw_charts(self) -> None:
        charts = self.query_one(HistoryCharts)
        history = self.history
        charts.display = history is not None  # an answer, even one with no samples yet
        if history is not None:
            app = self.tui
            live = live_point(app.queues.values(), app.hosts.values()) if app.hosts else None
            charts.show(history, self.window, live)

    def _fill_table(self, candidates: list[dict[str, Any]]) -> None:
        """Rows keyed by URL, cells updated in place (no flicker, the cursor stays)."""
        table: DataTable[str] = self.query_one(DataTable)
        wanted = {c["url"]: c for c in candidates}
        present = {str(k.value) for k in table.rows}
        for url in present - set(wanted):
            table.remove_row(url)
        for url, c in wanted.items():
            cells = candidate_cells(c)
            if url in present:
                for column, value in zip(COLUMNS, cells, strict=True):
                    if table.get_cell(url, column) != value:
                        table.update_cell(url, column, value, update_width=True)
            else:
                table.add_row(*cells, key=url)

    # --- switchover ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "window":
            # offered only with charts to switch, and only towards the other window
            drawn = self.history is not None
            return drawn and bool(parameters) and parameters[0] != self.window
        if action == "switchover":
            return self.tui.access.grants(SWITCHOVER_PERMISSION)
        return True

    def _cursor_url(self) -> str | None:
        table: DataTable[str] = self.query_one(DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_switchover(self) -> None:
        """Confirm, then hand over to the standby under the cursor (else any caught-up one)."""
        from xce.console.screens.confirm import ConfirmScreen

        access = self.tui.access
        if not access.grants(SWITCHOVER_PERMISSION):
            self.notify(
                f"{access.user} may not switch over ({SWITCHOVER_PERMISSION}; "
                f"permissions from {access.source})",
                title="Not permitted",
                severity="warning",
            )
            return
        view = self.view
        standbys = [
            c["url"] for c in view["candidates"] if c["reachable"] and c["role"] == "standby"
        ]
        if view.get("primary") is None or not standbys:
            why = "no primary answers" if view.get("primary") is None else "no standby is reachable"
            self.notify(f"{why}: nothing to switch over to", title="Switchover", severity="warning")
            return
        cursor = self._cursor_url()
        # The standby under the cursor; the only one if there is one; else the primary picks.
        target = cursor if cursor in standbys else standbys[0] if len(standbys) == 1 else None
        primary = view["primary"]

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._switchover(target), group="switchover", exclusive=True)

        self.app.push_screen(ConfirmScreen(switchover_text(primary, target)), confirmed)

    async def _switchover(self, target: str | None) -> None:
        client = self.tui.client
        try:
            answer = await client.switchover(target)
        except ApiError as exc:
            code = f"{exc.status} " if exc.status else ""
            self.notify(
                f"{code}{exc.message}", title="Switchover refused", severity="error", timeout=10
            )
            return
        new, old = answer["primary"], answer["previous"]
        self.notify(f"{old} hands the primary role to {new}", title="Switchover")
        deadline = time.monotonic() + 15
        epoch = None
        while time.monotonic() < deadline:
            try:
                health = await client.health(new)
            except ApiError:
                health = {}
            if health.get("role") == "primary":
                epoch = health.get("epoch")
                break
            await asyncio.sleep(0.3)
        if epoch is None:
            self.notify(
                f"{new} does not answer as primary yet",
                title="Switchover",
                severity="warning",
                timeout=10,
            )
        else:
            self.notify(
                f"Primary role moved from {old} to {new} (epoch {epoch})", title="Switchover done"
            )
        await self.refresh_cluster()
