"""`XceTui`: the full-screen console. Holds the client, the live data and the action runner.

All network I/O runs in Textual workers through `XceClient` (failover-aware), never in a
handler, so the UI never blocks. One long-lived worker reads the controller's event stream
(`GET /api/v1/events`): it fetches full listings only on the first connection and when the
server says the stream cannot be resumed (`hello.resumed == false`, `resync`); otherwise it
applies each change in place. A lost connection shows a banner and reconnects by itself,
with the last event id so nothing is missed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.binding import Binding

from xce.client import ApiError, XceClient
from xce.console.actions import ACTIONS, describe
from xce.console.commands import ConsoleCommands
from xce.console.model import JobModel
from xce.console.perms import Access

PAGE = 50_000
RECONNECT_S = (0.5, 1, 2, 4, 5)


class XceTui(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "XCE"
    COMMANDS = App.COMMANDS | {ConsoleCommands}
    BINDINGS = [
        Binding("1", "go('jobs')", "Jobs"),
        Binding("2", "go('queues')", "Queues"),
        Binding("3", "go('hosts')", "Hosts"),
        Binding("4", "go('cluster')", "Cluster"),
        Binding("5", "go('reservations')", "Reservations", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("ctrl+p", "command_palette", "Palette", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        controllers: list[str],
        token: str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        live: bool = True,
        login: bool = False,
        client: XceClient | None = None,
    ) -> None:
        """`client`: the one `xce tui` builds from the CLI's settings (CA file, client
        certificate, insecure switch: `xce.cli.common.async_client`); without it, a plain
        client for `controllers` and `token` (tests, loopback http://)."""
        super().__init__()
        self.controllers = controllers
        self.client = client or XceClient(controllers, token, timeout=10)
        self.jobs = JobModel(clock)
        self.hosts: dict[str, dict[str, Any]] = {}
        self.queues: dict[str, dict[str, Any]] = {}
        self.reservations: dict[str, dict[str, Any]] = {}  # advance reservations by name
        self.cluster_info: dict[str, Any] = {}
        self.access = Access.unknown()
        self.live = live
        self.force_login = login
        self.connection = "connecting"  # "ok", or why not
        self.version = 0  # bumped on every applied change
        self._queues_stale = False
        self.last_event_id: str | None = None
        self.transitions: dict[str, list[tuple[float, str, str]]] = {}
        self.jobs_screen: Any = None

    # --- start-up --------------------------------------------------------------------------

    def on_mount(self) -> None:
        from xce.console.screens.cluster import ClusterScreen
        from xce.console.screens.hosts import HostsScreen
        from xce.console.screens.jobs import JobsScreen
        from xce.console.screens.queues import QueuesScreen
        from xce.console.screens.reservations import ReservationsScreen

        self.add_mode("jobs", JobsScreen)
        self.add_mode("queues", QueuesScreen)
        self.add_mode("hosts", HostsScreen)
        self.add_mode("cluster", ClusterScreen)
        self.add_mode("reservations", ReservationsScreen)
        self.switch_mode("jobs")
        if self.live:
            self.run_worker(self._start(), group="start", exclusive=True)
            self.set_interval(2.0, self._refresh_counts)

    async def _start(self) -> None:
        if self.force_login or not await self._authorised():
            from xce.console.screens.login import LoginScreen

            self.push_screen(LoginScreen(self.controllers), self._logged_in)
            return
        self.start_stream()

    async def _authorised(self) -> bool:
        try:
            await self.client.cluster()
        except ApiError as exc:
            return exc.status != 401
        return True

    def _logged_in(self, ok: bool | None) -> None:
        if ok:
            self.start_stream()
        else:
            self.exit(1)

    def start_stream(self) -> None:
        self.run_worker(self._stream(), group="stream", exclusive=True)

    # --- the live stream ---------------------------------------------------------------------

    async def _stream(self) -> None:
        attempt = 0
        while True:
            try:
                async for event in self.client.events(self.last_event_id):
                    if event.kind == "hello":
                        attempt = 0
                        if not event.data.get("resumed"):
                            await self.refetch()
                        self._set_connection("ok")
                    elif event.kind == "resync":
                        await self.refetch()
                    else:
                        self.apply(event.kind, event.data)
                    self.last_event_id = event.id
            except ApiError as exc:
                if exc.status in (401, 403):
                    self._set_connection(f"refused: {exc.message}")
                    self.notify(exc.message, title=f"Error {exc.status}", severity="error")
                    return
                where = ", ".join(self.client.controllers)
                self._set_connection(f"connection lost ({where}); reconnecting")
            delay = RECONNECT_S[min(attempt, len(RECONNECT_S) - 1)]
            attempt += 1
            await asyncio.sleep(delay)

    def _set_connection(self, text: str) -> None:
        self.connection = text
        self.version += 1
        self._changed()

    async def refetch(self) -> None:
        """Full listings: on first connect and when the stream cannot be resumed."""
        try:
            who = await self.client.whoami()
        except ApiError:
            who = None  # not fatal: offer everything and let the server decide
        self.access = (
            Access.from_whoami(who)
            if who
            else Access.unknown("admin" if self.client.token is None else "?")
        )
        rows: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await self.client.jobs(offset=offset, limit=PAGE)
            rows.extend(page["jobs"])
            offset += len(page["jobs"])
            if not page["jobs"] or offset >= page["total"]:
                break
        self.jobs.load(rows)
        self.hosts = {h["name"]: h for h in await self.client.hosts()}
        self.queues = {q["name"]: q for q in await self.client.queues()}
        try:
            listed = await self.client.request("GET", "/api/v1/reservations")
            self.reservations = {r["name"]: r for r in listed["reservations"]}
        except ApiError:
            self.reservations = {}  # an older controller, or no host:view: none shown
        self.cluster_info = await self.client.cluster()
        self.version += 1
        self._changed()

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        """One stream change, in place."""
        if kind == "job":
            if data.get("removed"):
                self.jobs.remove(str(data["id"]))
            else:
                old = self.jobs.rows.get(str(data["id"]))
                if old is None or old.get("state") != data.get("state"):
                    self._note_transition(str(data["id"]), data)
                self.jobs.upsert(data)
            self._queues_stale = True
        elif kind == "array":
            self.jobs.set_array_pending(str(data["array_id"]), data.get("pending"))
            self._queues_stale = True
        elif kind == "host":
            if data.get("removed"):
                self.hosts.pop(data["name"], None)
            else:
                self.hosts[data["name"]] = data
        elif kind == "queue":
            if data.get("removed"):
                self.queues.pop(data["name"], None)
            else:
                self.queues[data["name"]] = data
        elif kind == "reservation":
            if data.get("removed"):
                self.reservations.pop(data["name"], None)
            else:
                self.reservations[data["name"]] = data
        self.version += 1
        self._changed()

    def _note_transition(self, job_id: str, data: dict[str, Any]) -> None:
        """State changes seen live, for the job detail's history (bounded)."""
        if len(self.transitions) > 20_000:
            self.transitions.pop(next(iter(self.transitions)))
        seen = self.transitions.setdefault(job_id, [])
        seen.append((time.time(), str(data.get("state")), str(data.get("reason") or "")))
        del seen[:-30]

    def _changed(self) -> None:
        for screen in self.screen_stack:
            hook = getattr(screen, "data_changed", None)
            if hook is not None:
                hook()

    async def _refresh_counts(self) -> None:
        """Queue counts follow job changes: refresh them (and the cluster view) lazily, at
        most every 2 s and only after job changes. Host load comes with heartbeats, which
        are not events: it is re-read (every 2 s) only while the hosts screen is shown."""
        if self.connection != "ok":
            return
        hosts = self.current_mode == "hosts"
        if not self._queues_stale and not hosts:
            return
        counts, self._queues_stale = self._queues_stale, False
        self.run_worker(self._fetch_counts(counts, hosts), group="counts", exclusive=True)

    async def _fetch_counts(self, counts: bool = True, hosts: bool = False) -> None:
        try:
            if counts:
                self.queues = {q["name"]: q for q in await self.client.queues()}
                self.cluster_info = await self.client.cluster()
            if hosts:
                self.hosts = {h["name"]: h for h in await self.client.hosts()}
        except ApiError:
            return
        self.version += 1
        self._changed()

    async def on_unmount(self) -> None:
        await self.client.close()

    # --- navigation ------------------------------------------------------------------------

    def action_go(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_help(self) -> None:
        from xce.console.screens.help import HelpScreen

        self.push_screen(HelpScreen(self.screen))

    # --- actions ---------------------------------------------------------------------------

    def offer(self, action: str, targets: list[str]) -> None:
        """Confirm, then run `action` on `targets`; refused or empty gets a notification."""
        from xce.console.screens.confirm import ConfirmScreen

        spec = ACTIONS[action]
        if not self.access.allows(action):
            self.notify(
                f"{self.access.user} may not {spec.verb.lower()} "
                f"({action}; permissions from {self.access.source})",
                title="Not permitted",
                severity="warning",
            )
            return
        if not targets:
            self.notify("nothing selected", title=spec.verb, severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._run_action(action, targets), group="actions")

        self.push_screen(ConfirmScreen(describe(spec, targets)), confirmed)

    async def _run_action(self, action: str, targets: list[str]) -> None:
        spec = ACTIONS[action]
        done: list[str] = []
        failed: list[str] = []
        for target in targets:
            try:
                await spec.call(self.client, target)
                done.append(target)
            except ApiError as exc:
                code = f"{exc.status} " if exc.status else ""
                failed.append(f"{target}: {code}{exc.message}")
        if done:
            self.notify(f"{spec.verb}: {', '.join(done)}", title="Done")
            self.jobs.selected.clear()
        if failed:
            self.notify(
                "\n".join(failed[:5]), title=f"{spec.verb} refused", severity="error", timeout=10
            )
        self._changed()

    def offer_jobs(self, action: str) -> None:
        """A job action on the jobs screen's selection or cursor row (palette entry point)."""
        screen = getattr(self, "jobs_screen", None)
        cursor = screen.table.current if screen is not None else None
        self.offer(action, self.jobs.targets(cursor))
