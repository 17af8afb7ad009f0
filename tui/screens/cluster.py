"""Cluster: controllers and which one answers, role, epoch, replication lag, counts and
scheduler statistics, from `GET /api/v1/cluster` (fields a controller does not report yet
show as `-`)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.screens.base import LiveScreen


def _get(info: dict[str, Any], *path: str) -> Any:
    value: Any = info
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return "-"
        value = value[key]
    return value


def cluster_text(info: dict[str, Any], answering: str, access: Any) -> str:
    controllers = info.get("controllers") or []
    lines = ["Controllers"]
    for url in controllers:
        mark = "answering" if url.rstrip("/") == answering else ""
        lines.append(f"  {url:<34} {mark}")
    primary = info.get("primary") or (answering if info.get("role") == "primary" else "-")
    lines += [
        "",
        f"  role of answering controller  {info.get('role', '-')}",
        f"  primary                       {primary}",
        f"  epoch                         {_get(info, 'epoch')}",
        f"  replication lag               {_get(info, 'replication', 'lag_records')} records"
        f" / {_get(info, 'replication', 'lag_s')} s",
        f"  version                       {info.get('version', '-')}",
        "",
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
    lines += ["", f"You: {access.user}  permissions: {access.source}"]
    return "\n".join(lines)


class ClusterScreen(LiveScreen):
    CSS_PATH = "cluster.tcss"

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        with VerticalScroll(id="cluster"):
            yield Static(id="info", markup=False)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = "Cluster"
        super().on_mount()

    def redraw(self) -> None:
        app = self.tui
        self.query_one("#info", Static).update(
            cluster_text(app.cluster_info, app.client.base_url, app.access))
