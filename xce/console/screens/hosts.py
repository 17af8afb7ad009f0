"""Hosts: status, admin state, slots, memory, a use bar per resource (slots, memory, GPUs),
load, attributes; a group/rack topology tree (`t`); open / close / drain."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Tree

from xce.client.readable import host_status  # the CLI's words: closed, draining, drained...
from xce.console import fmt
from xce.console.screens.base import LiveScreen
from xce.console.widgets.bars import UseCells, header, use_bars

COLUMNS = (
    "HOST",
    "STATUS",
    "ADMIN",
    "SLOTS",
    "MEMORY",
    "LOAD",
    "RACK",
    "GROUP",
    "VERSION",  # the worker's build: a rolling upgrade's progress at a glance
    "ATTRIBUTES",
)
USE = "USE"  # the bars' column, after MEMORY
USE_AFTER = COLUMNS.index("MEMORY") + 1


def host_cells(h: dict[str, Any]) -> tuple[str, ...]:
    load = h.get("load") or {}
    load_text = f"{load['load1']:.2f}" if isinstance(load.get("load1"), int | float) else "-"
    attrs = {k: v for k, v in (h.get("attributes") or {}).items() if k not in ("rack", "group")}
    used_mb, total_mb = h.get("memory_used_mb", 0), h.get("memory_mb", 0)
    return (
        h["name"],
        host_status(h),
        h["admin"],
        f"{h['slots_used']}/{h['slots']}",
        f"{fmt.size(used_mb * 2**20) if used_mb else '0'}/{fmt.size(total_mb * 2**20)}",
        load_text,
        h.get("rack") or "-",
        h.get("group") or "-",
        h.get("worker_version") or "-",
        " ".join([*(f"{k}={v}" for k, v in sorted(attrs.items())), *_gres(h)]),
    )


def host_use(h: dict[str, Any]) -> UseCells:
    """(used, total) of slots, memory and GPUs: the figures the use bars draw."""
    gpu = (h.get("gres") or {}).get("gpu")
    gpus = (gpu["total"] - gpu["free"], gpu["total"]) if gpu else None
    return (
        (h.get("slots_used", 0), h.get("slots", 0)),
        (h.get("memory_used_mb", 0), h.get("memory_mb", 0)),
        gpus,
    )


def _gres(h: dict[str, Any]) -> list[str]:
    """Devices as the CLI's GRES_FREE shows them: `gpu:1/2 free` (free of total)."""
    return [f"{kind}:{g['free']}/{g['total']} free" for kind, g in (h.get("gres") or {}).items()]


class HostsScreen(LiveScreen):
    CSS_PATH = "hosts.tcss"
    BINDINGS = [
        Binding("o", "host('host.open')", "Open"),
        Binding("c", "host('host.close')", "Close"),
        Binding("d", "host('host.drain')", "Drain"),
        Binding("t", "topology", "Topology"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._use: dict[str, UseCells] = {}  # the figures each row's bars show
        self._cells: dict[str, tuple[str, ...]] = {}  # each row's text cells as drawn
        self._drawn: dict[str, dict[str, Any]] = {}  # the host view each row was drawn from

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        table: DataTable[Any] = DataTable(id="hosts", cursor_type="row")
        for column in (*COLUMNS[:USE_AFTER], USE, *COLUMNS[USE_AFTER:]):
            label = header("slots", "mem", "gpus") if column == USE else column
            table.add_column(label, key=column)
        yield table
        tree: Tree[str] = Tree("cluster", id="topology")
        yield tree
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = "Hosts"
        super().on_mount()
        self.query_one(DataTable).focus()

    def redraw(self) -> None:
        self.refresh_bindings()
        table = self.query_one(DataTable)
        hosts = self.tui.hosts
        present = {str(k.value) for k in table.rows}
        for name in present - set(hosts):
            table.remove_row(name)
            self._use.pop(name, None)
            self._cells.pop(name, None)
            self._drawn.pop(name, None)
        # A view the stream did not replace is skipped; one re-read (every 2 s) costs one
        # comparison per host, and a row's cells are looked at only when its figures moved.
        for name in sorted(hosts):
            view = hosts[name]
            if name in present and self._drawn.get(name) is view:
                continue
            self._drawn[name] = view
            cells = host_cells(view)
            use = host_use(view)
            if name in present:
                if self._cells.get(name) != cells:
                    for column, value in zip(COLUMNS, cells, strict=True):
                        if table.get_cell(name, column) != value:
                            table.update_cell(name, column, value)
                if self._use.get(name) != use:
                    table.update_cell(name, USE, use_bars(use))
            else:
                table.add_row(*cells[:USE_AFTER], use_bars(use), *cells[USE_AFTER:], key=name)
            self._cells[name] = cells
            self._use[name] = use
        if self.query_one(Tree).has_class("-shown"):
            self._build_tree()

    def _build_tree(self) -> None:
        """group -> rack -> host, each host with its status and slot use in words."""
        tree: Tree[str] = self.query_one(Tree)
        tree.clear()
        tree.root.expand()
        groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for h in self.tui.hosts.values():
            groups.setdefault(h.get("group") or "(no group)", {}).setdefault(
                h.get("rack") or "(no rack)", []
            ).append(h)
        for group in sorted(groups):
            gnode = tree.root.add(f"group {group}", expand=True)
            for rack in sorted(groups[group]):
                hosts = groups[group][rack]
                online = sum(host_status(h) == "online" for h in hosts)
                rnode = gnode.add(f"rack {rack} ({online}/{len(hosts)} online)", expand=True)
                for h in sorted(hosts, key=lambda x: x["name"]):
                    rnode.add_leaf(
                        f"{h['name']}  {host_status(h)}  slots {h['slots_used']}/{h['slots']}",
                        data=h["name"],
                    )

    def action_topology(self) -> None:
        tree = self.query_one(Tree)
        table = self.query_one(DataTable)
        shown = not tree.has_class("-shown")
        tree.set_class(shown, "-shown")
        table.set_class(shown, "-hidden")
        if shown:
            self._build_tree()
            tree.focus()
        else:
            table.focus()

    def _current(self) -> str | None:
        tree: Tree[str] = self.query_one(Tree)
        if tree.has_class("-shown"):
            node = tree.cursor_node
            return node.data if node is not None else None
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_host(self, action: str) -> None:
        name = self._current()
        self.tui.offer(action, [name] if name else [])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "host" and parameters:
            return self.tui.access.allows(str(parameters[0]))
        return True
