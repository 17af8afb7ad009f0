"""Job detail: every field, resource usage, dependencies, history and a live output tail.

The record (with the controller's history of the job) is refetched in a worker when the
stream changes this job, and every `TAIL_S` seconds while it is active. The tail pane
follows `GET /api/v1/jobs/{id}/tail` in another worker: stdout by default, `o` switches to
stderr. It asks only for the bytes after the last ones it has, appends them, and keeps at
most `TAIL_KEEP_LINES` lines; once a finished job's file has been read it stops asking.
"""

from __future__ import annotations

import json
import re
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical, VerticalScroll
from textual.widgets import Log, Static

from xce.client import ApiError
from xce.console import fmt
from xce.console.screens.base import LiveScreen
from xce.console.widgets.usage_chart import JobUsageChart, usage_path

TAIL_S = 2.0
TAIL_FETCH = 64 * 1024  # bytes per request
TAIL_ROUNDS = 4  # requests per tick while more is waiting
TAIL_KEEP_LINES = 2000
USAGE_S = 15.0  # the usage chart's refetch: workers report usage about this often
ACTIVE = ("RUN", "USUSP", "SSUSP")
FINISHED = ("DONE", "EXIT")
# Terminal escapes and control characters a job may print: shown as text, never obeyed.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


def printable(text: str) -> str:
    """Job output as plain lines: CRLF and lone CR end lines, escapes are dropped."""
    return _ESCAPES.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


class JobDetailScreen(LiveScreen):
    CSS_PATH = "job_detail.tcss"
    # Wide terminals show the record and the tail side by side, narrow ones stacked.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("escape,backspace", "back", "Back"),
        Binding("o", "toggle_stream", "stdout/stderr"),
        Binding("s", "job('job.suspend')", "Suspend"),
        Binding("r", "job('job.resume')", "Resume"),
        Binding("R", "job('job.requeue')", "Requeue"),
        Binding("k", "job('job.kill')", "Kill"),
    ]

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: dict[str, Any] = {}
        self.error = ""
        self._seen: object = None
        # The tail pane: which stream, where the next request starts (None: the latest
        # bytes), which attempt it shows, and whether a finished job's file is all read.
        self.stream = "stdout"
        self.tail_offset: int | None = None
        self.tail_attempt: int | None = None
        self.tail_done = False
        self.tail_state = ""
        self.tail_note = ""
        self._tail_busy = False
        self._tail_gen = 0  # bumped when the pane switches stream: older reads drop out

    def compose(self) -> ComposeResult:
        yield from self.compose_frame()
        with Container(id="body"):
            with VerticalScroll(id="detail"):
                yield Static(id="fields", markup=False)
                yield Static(id="usage", markup=False)
                yield JobUsageChart(id="usage-chart")
                yield Static(id="deps", markup=False)
                yield Static(id="history", markup=False)
            with Vertical(id="tailbox"):
                yield Static(id="tail-title", markup=False)
                yield Log(id="tail", max_lines=TAIL_KEEP_LINES)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.sub_title = f"Job {self.job_id}"
        super().on_mount()
        if self.tui.live:
            self.fetch()
            self.poll_tail()
            self.set_interval(TAIL_S, self._tick_live)
            self.poll_usage()
            self.set_interval(USAGE_S, self._tick_usage)

    # --- the record ------------------------------------------------------------------------

    def fetch(self) -> None:
        self.run_worker(self._fetch(), group="detail", exclusive=True)

    async def _fetch(self) -> None:
        try:
            self.detail = await self.tui.client.job(self.job_id)
            self.error = ""
        except ApiError as exc:
            self.error = f"{exc.status} {exc.message}"
        if self.detail.get("state") not in FINISHED:
            self.tail_done = False  # requeued, or not finished yet: keep following
        self.data_changed()

    def _tick_live(self) -> None:
        row = self.tui.jobs.rows.get(self.job_id)
        if row is not self._seen:
            self._seen = row
            self.fetch()  # the stream changed this job
        elif self.detail.get("state") in ACTIVE:
            self.fetch()
        self.poll_tail()

    # --- the usage chart -------------------------------------------------------------------

    def _tick_usage(self) -> None:
        if self.detail.get("state") in ACTIVE:
            self.poll_usage()

    @work(group="usage", exclusive=True)
    async def poll_usage(self) -> None:
        """The attempt's CPU and memory series; a controller without it leaves the chart
        saying why (the text usage above still shows the totals)."""
        try:
            answer = await self.tui.client.request("GET", usage_path(self.job_id))
        except ApiError as exc:
            answer = {"points": [], "kept": False, "error": exc.message}
        if isinstance(answer, dict):
            self.query_one("#usage-chart", JobUsageChart).show(answer)

    # --- the tail pane ---------------------------------------------------------------------

    def poll_tail(self) -> None:
        if self._tail_busy or self.tail_done:
            return
        waiting = ("PEND", "PSUSP")
        if self.tail_state in waiting and self.detail.get("state") in waiting:
            return  # nothing to read until it starts (the stream refetches the record)
        self._tail_busy = True
        self.run_worker(self._read_tail(self._tail_gen), group="tail")

    async def _read_tail(self, gen: int) -> None:
        try:
            for _ in range(TAIL_ROUNDS):
                try:
                    answer = await self.tui.client.tail(
                        self.job_id, self.stream, self.tail_offset, TAIL_FETCH
                    )
                except ApiError as exc:
                    if gen == self._tail_gen:
                        self.tail_note = (
                            f"{exc.status} {exc.message}" if exc.status else exc.message
                        )
                    break
                if gen != self._tail_gen:
                    break  # the pane switched stream meanwhile: not this answer's pane
                self.tail_note = ""
                if not self._append(answer):
                    break
        finally:
            if gen == self._tail_gen:
                self._tail_busy = False
            self.data_changed()

    def _append(self, answer: dict[str, Any]) -> bool:
        """Add an answer's bytes to the pane; True when more is waiting already."""
        log = self.query_one("#tail", Log)
        if self.tail_attempt is not None and answer["attempt"] != self.tail_attempt:
            log.clear()  # another attempt: its output starts again from byte 0
            self.tail_offset = None
            self.tail_attempt = answer["attempt"]
            return True
        self.tail_attempt = answer["attempt"]
        self.tail_state = answer["state"]
        if answer["truncated"] and self.tail_offset is not None:
            log.write(f"\n[… {answer['offset'] - self.tail_offset} bytes skipped …]\n")
        elif self.tail_offset is None and answer["offset"] > 0:
            log.write("[… earlier output not shown …]\n")
        if answer["data"]:
            # Follow the end unless the reader scrolled up to read something.
            follow = log.max_scroll_y == 0 or log.is_vertical_scroll_end
            log.write(printable(answer["data"]), scroll_end=False)
            if follow:
                log.call_after_refresh(log.scroll_end, animate=False, x_axis=False)
        moved = self.tail_offset is None or answer["next_offset"] > self.tail_offset
        self.tail_offset = answer["next_offset"]
        more = moved and answer["next_offset"] < answer["end"]
        if not more and not answer["running"] and answer["state"] in FINISHED:
            self.tail_done = True
        return more

    def action_toggle_stream(self) -> None:
        self.stream = "stderr" if self.stream == "stdout" else "stdout"
        self.query_one("#tail", Log).clear()
        self.tail_offset = self.tail_attempt = None
        self.tail_done = False
        self.tail_note = ""
        self._tail_gen += 1  # a read still running for the other stream drops its answer
        self._tail_busy = False
        self.data_changed()
        if self.tui.live:
            self.poll_tail()

    def _tail_title(self) -> str:
        other = "stderr" if self.stream == "stdout" else "stdout"
        if self.tail_note:
            how = f"unavailable: {self.tail_note}"
        elif self.tail_state in ACTIVE:
            how = f"live, every {TAIL_S:g}s"
        elif self.tail_state in FINISHED:
            how = "the file the job left"
        elif self.tail_state:
            how = "not started yet"
        else:
            how = "waiting for the controller" if self.tui.live else "not connected"
        return f"{self.stream}: {how}  (o: {other})"

    # --- drawing ---------------------------------------------------------------------------

    def redraw(self) -> None:
        self.refresh_bindings()
        self.query_one("#tail-title", Static).update(self._tail_title())
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
            f"{fmt.duration(u.get('wall_time_s'))}"
        )
        deps = d.get("dependency") or "none"
        self.query_one("#deps", Static).update(f"Dependencies\n  {deps}")
        self.query_one("#history", Static).update(self._history(d))

    def _fields(self, d: dict[str, Any]) -> str:
        keys = (
            "id",
            "name",
            "user",
            "state",
            "reason",
            "queue",
            "host",
            "slots",
            "memory_mb",
            "walltime_s",
            "resources",
            "attempt",
            "exit_code",
            "exit_signal",
            "submit_host",
            "cwd",
            "command",
            "script",
        )
        lines = [f"Job {d.get('id', self.job_id)}"]
        if d.get("archived"):  # purged by retention: the controller answered from accounting
            lines[0] += "  (archived: from the accounting store)"
        for key in keys:
            value = d.get(key)
            if value in (None, "", [], {}):
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            lines.append(f"  {key:<12} {text.splitlines()[0] if text else ''}")
        if len(d.get("hosts") or ()) > 1:  # a multi-host job: every host and its slots
            lines.append(f"  {'exec_host':<12} {d.get('exec_host')}")
            granted = [
                f"{h['host']}={','.join(h['devices'])}"
                for h in d["hosts"]
                if isinstance(h, dict) and h.get("devices")
            ]
            if granted:  # each host's own GPUs
                lines.append(f"  {'devices':<12} {' '.join(granted)}")
        problems = d.get("output_problems") or []
        if problems:  # outputs the worker could not return: each with its reason
            lines.append(f"  {'not returned':<12} {len(problems)} output(s):")
            lines.extend(f"    {str(p).splitlines()[0] if p else ''}" for p in problems[:20])
            if len(problems) > 20:
                lines.append(f"    ... and {len(problems) - 20} more (xce job show)")
        for key in ("submit_time", "start_time", "end_time"):
            if d.get(key):
                lines.append(f"  {key:<12} {fmt.full_stamp(d[key])}")
        # the scheduler's run-time prediction (xce/sched/predict.py): how long the job is
        # expected to run and, once it runs, when it is expected to end
        if d.get("predicted_run_s") is not None and not d.get("end_time"):
            lines.append(f"  {'predicted':<12} {fmt.duration(d['predicted_run_s'])}")
        if d.get("expected_end") and not d.get("end_time"):
            lines.append(f"  {'expected end':<12} {fmt.full_stamp(d['expected_end'])}")
        return "\n".join(lines)

    def _history(self, d: dict[str, Any]) -> str:
        lines = ["History"]
        if "history" in d:  # the controller's account (xce/controller/history.py)
            for entry in d["history"]:
                at = fmt.full_stamp(entry["at"]) if entry.get("at") else "time unknown".ljust(19)
                event = str(entry.get("event", "")).replace("_", " ")
                lines.append(f"  {at}  {event:<14} {entry.get('detail', '')}".rstrip())
            return "\n".join(lines)
        # An older controller: rebuild from the record's times and what this console saw.
        if d.get("submit_time"):
            lines.append(f"  {fmt.full_stamp(d['submit_time'])}  submitted to {d.get('queue')}")
        if d.get("start_time"):
            lines.append(
                f"  {fmt.full_stamp(d['start_time'])}  started on {d.get('host')} "
                f"(attempt {d.get('attempt')})"
            )
        if d.get("end_time"):
            lines.append(
                f"  {fmt.full_stamp(d['end_time'])}  ended {d.get('state')} "
                f"exit {d.get('exit_code')}"
            )
        for at, state, reason in self.tui.transitions.get(self.job_id, []):
            lines.append(
                f"  {fmt.full_stamp(at)}  seen {state}" + (f" ({reason})" if reason else "")
            )
        return "\n".join(lines)

    # --- actions ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_job(self, action: str) -> None:
        self.tui.offer(action, [self.job_id])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "job" and parameters:
            return self.tui.access.allows(str(parameters[0]))
        return True
