"""Job detail: every field, resource usage, dependencies, history and the output tail.

Refetched (in a worker) when the stream changes this job; stdout/stderr are re-read every
`TAIL_S` seconds while the job is active. XCE workers hand output files to the controller
when a job ends, so the tail of a running job says so instead of showing stale text.
History: the record's own timestamps plus every state change this console saw live.
"""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui import fmt
from tui.screens.base import LiveScreen
from xce.client import ApiError

TAIL_S = 2.0
TAIL_LINES = 15
ACTIVE = ("RUN", "USUSP", "SSUSP")


class JobDetailScreen(LiveScreen):
    CSS_PATH = "job_detail.tcss"
    BINDINGS = [
        Binding("escape,backspace", "back", "Back"),
        Binding("s", "job('job.suspend')", "Suspend"),
        Binding("r", "job('job.resume')", "Resume"),
        Binding("R", "job('job.requeue')", "Requeue"),
        Binding("k", "job('job.kill')", "Kill"),
    ]

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: dict[str, Any] = {}
        self.output: dict[str, str] = {}
        self.error = ""
        self._seen: object = None

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        with VerticalScroll(id="detail"):
            yield Static(id="fields", markup=False)
            yield Static(id="usage", markup=False)
            yield Static(id="deps", markup=False)
            yield Static(id="history", markup=False)
            yield Static(id="output", markup=False)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = f"Job {self.job_id}"
        super().on_mount()
        if self.tui.live:
            self.fetch()
            self.set_interval(TAIL_S, self._tail)

    def fetch(self) -> None:
        self.run_worker(self._fetch(), group="detail", exclusive=True)

    async def _fetch(self) -> None:
        try:
            self.detail = await self.tui.client.job(self.job_id)
            self.error = ""
            await self._read_output()
        except ApiError as exc:
            self.error = f"{exc.status} {exc.message}"
        self.data_changed()

    async def _read_output(self) -> None:
        files = {str(f.get("path")) for f in await self.tui.client.files(self.job_id)}
        for name in ("stdout", "stderr"):
            if name in files:
                raw = await self.tui.client.download(self.job_id, name)
                lines = raw.decode("utf-8", "replace").splitlines()
                self.output[name] = "\n".join(lines[-TAIL_LINES:]) or "(empty)"

    async def _tail(self) -> None:
        row = self.tui.jobs.rows.get(self.job_id)
        if row is not self._seen:
            self._seen = row
            self.fetch()  # the stream changed this job
        elif self.detail.get("state") in ACTIVE:
            self.fetch()

    def redraw(self) -> None:
        self.refresh_bindings()
        d = self.detail or self.tui.jobs.rows.get(self.job_id) or {}
        if self.error:
            self.query_one("#fields", Static).update(f"Job {self.job_id}: {self.error}")
            return
        if not d:
            self.query_one("#fields", Static).update(f"Job {self.job_id}: loading")
            return
        self.query_one("#fields", Static).update(self._fields(d))
        u = d.get("usage") or {}
        self.query_one("#usage", Static).update(
            "Usage\n"
            f"  CPU total {fmt.duration(u.get('cpu_time_s'))}  user "
            f"{u.get('cpu_user_s', 0):.2f}s  system {u.get('cpu_system_s', 0):.2f}s\n"
            f"  max RSS {fmt.size(u.get('max_rss_bytes'))}  wall "
            f"{fmt.duration(u.get('wall_time_s'))}")
        deps = d.get("dependency") or "none"
        self.query_one("#deps", Static).update(f"Dependencies\n  {deps}")
        self.query_one("#history", Static).update(self._history(d))
        self.query_one("#output", Static).update(self._output(d))

    def _fields(self, d: dict[str, Any]) -> str:
        keys = ("id", "name", "user", "state", "reason", "queue", "host", "slots",
                "memory_mb", "walltime_s", "resources", "attempt", "exit_code", "exit_signal",
                "submit_host", "cwd", "command", "script")
        lines = [f"Job {d.get('id', self.job_id)}"]
        for key in keys:
            value = d.get(key)
            if value in (None, "", [], {}):
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            lines.append(f"  {key:<12} {text.splitlines()[0] if text else ''}")
        for key in ("submit_time", "start_time", "end_time"):
            if d.get(key):
                lines.append(f"  {key:<12} {fmt.full_stamp(d[key])}")
        return "\n".join(lines)

    def _history(self, d: dict[str, Any]) -> str:
        lines = ["History"]
        if d.get("submit_time"):
            lines.append(f"  {fmt.full_stamp(d['submit_time'])}  submitted to {d.get('queue')}")
        if d.get("start_time"):
            lines.append(f"  {fmt.full_stamp(d['start_time'])}  started on {d.get('host')} "
                         f"(attempt {d.get('attempt')})")
        if d.get("end_time"):
            lines.append(f"  {fmt.full_stamp(d['end_time'])}  ended {d.get('state')} "
                         f"exit {d.get('exit_code')}")
        for at, state, reason in self.tui.transitions.get(self.job_id, []):
            lines.append(f"  {fmt.full_stamp(at)}  seen {state}" + (f" ({reason})"
                                                                      if reason else ""))
        return "\n".join(lines)

    def _output(self, d: dict[str, Any]) -> str:
        parts = []
        for name in ("stdout", "stderr"):
            text = self.output.get(name)
            if text is None:
                text = ("(arrives when the job ends: workers return output files then)"
                        if d.get("state") not in ("DONE", "EXIT") else "(none)")
            parts.append(f"{name} (last {TAIL_LINES} lines)\n{text}")
        return "\n\n".join(parts)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_job(self, action: str) -> None:
        self.tui.offer(action, [self.job_id])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "job" and parameters:
            return self.tui.access.allows(str(parameters[0]))
        return True
