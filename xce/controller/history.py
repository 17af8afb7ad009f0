"""Job history: what happened to a job and when, for `GET /api/v1/jobs/{job_id}`.

Everything is derived from what is already durable, and the common case costs no memory:
- The current attempt's submission, start (host, attempt) and end (state, exit code,
  signal, reason) are read from the job record itself, whose times the WAL keeps.
- Only what a record forgets is kept here, from a listener on applied events
  (`ControllerService.listeners`): suspends, resumes, kill requests, requeues and lost
  hosts, plus the start and end of every earlier attempt (taken from the record as it was
  just before the requeue). A job that just runs and ends stores nothing.
- Array-wide holds, releases and cancels are kept under the array id and shown on the
  array and on each task that had not started yet at the time.

After a controller restart or failover the kept entries are gone (they are not in the WAL),
and the history is rebuilt from the recovered records as well as it can be: the submission
and the current attempt's start and end keep their exact times; earlier attempts, a
suspension in force and a pending kill request show with `"at": null` ("time unknown").
Everything that happens after the restart is recorded exactly again.

Bounded: at most `MAX_ENTRIES` kept entries per job (the oldest go first), pre-images for the
`PRE_IMAGES` most recently changed jobs, and entries of jobs that retention removed are
pruned as events flow.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any

from xce.core import events as ev
from xce.core.model import ArrayRecord, JobRecord, JobState
from xce.core.state import ClusterState

MAX_ENTRIES = 50
PRE_IMAGES = 100_000
PRUNE_EVERY = 100_000
UNKNOWN = "before the controller restarted; time unknown"
# Kept entries that end an attempt: before a start at the same instant.
_EARLIER = ("started", "finished", "killed", "host_lost", "requeued")

Entry = tuple[float | None, str, str]  # (at, event, detail)


def _view(entry: Entry) -> dict[str, Any]:
    return {"at": entry[0], "event": entry[1], "detail": entry[2]}


def _ended(job: JobRecord) -> Entry | None:
    """The end of the record's attempt: finished (it ran) or killed (it never started)."""
    if job.end_time is None:
        return None
    if job.start_time is None:
        return (job.end_time, "killed", job.reason or "killed before it started")
    parts = [job.state.value]
    if job.exit_code is not None:
        parts.append(f"exit code {job.exit_code}")
    if job.exit_signal is not None:
        parts.append(f"signal {job.exit_signal}")
    detail = ", ".join(parts) + (f" ({job.reason})" if job.reason else "")
    return (job.end_time, "finished", detail)


def _started(job: JobRecord) -> Entry | None:
    if job.start_time is None:
        return None
    return (job.start_time, "started", f"on {job.host} (attempt {job.attempt})")


class JobHistory:
    """Kept history entries plus the views that merge them with the records."""

    def __init__(self, state: ClusterState, since: float) -> None:
        self.state = state
        # Jobs submitted before this instant were recovered, not watched: their history
        # may hold approximations (see the module docstring).
        self.since = since
        self.kept: dict[str, list[Entry]] = {}
        # Each job's record as of the last event that touched it: the pre-image a requeue
        # needs. Seeded with the running jobs, whose start a requeue would erase.
        self._last: OrderedDict[str, JobRecord] = OrderedDict(
            (job_id, state.jobs[job_id])
            for load in state.host_load.values()
            for job_id in sorted(load.jobs)
        )
        self._observed = 0

    # --- recording ----------------------------------------------------------------------

    def observe(self, event: ev.Event) -> None:
        """A listener: called with each event right after `ClusterState.apply`."""
        if isinstance(event, ev.JobUsageReported):
            return
        self._observed += 1
        if self._observed % PRUNE_EVERY == 0:
            self.prune()
        if isinstance(event, ev.ArrayHeld):
            self._keep(str(event.number), (event.at, "held", "tasks not started yet are held"))
        elif isinstance(event, ev.ArrayReleased):
            self._keep(str(event.number), (event.at, "released", "held tasks may start"))
        elif isinstance(event, ev.ArrayCancelled):
            self._keep(
                str(event.number), (event.at, "cancelled", f"tasks not started yet: {event.reason}")
            )
        job_id = getattr(event, "job_id", None)
        job = self.state.jobs.get(job_id) if job_id is not None else None
        if job is None:
            return
        before = self._last.get(job.id)
        if isinstance(event, ev.JobSuspended):
            by = "by the system" if event.by_system else "on request"
            self._keep(job.id, (event.at, "suspended", f"{by}; now {job.state.value}"))
        elif isinstance(event, ev.JobResumed):
            self._keep(job.id, (event.at, "resumed", f"now {job.state.value}"))
        elif isinstance(event, ev.JobKillRequested):
            if event.requeue:
                self._keep(
                    job.id,
                    (
                        event.at,
                        "requeue_requested",
                        f"attempt {job.attempt} on {job.host} is being ended; the "
                        "job waits for a host again once it has",
                    ),
                )
            else:
                self._keep(
                    job.id,
                    (event.at, "kill_requested", f"the job on {job.host} is being signalled"),
                )
        elif isinstance(event, ev.JobRequeued):
            self._earlier_attempt(job, before)
            self._keep(
                job.id, (event.at, "requeued", f"{event.reason}; attempt {job.attempt} waits")
            )
        elif isinstance(event, ev.JobPreempted):  # on both jobs
            how = "requeued" if event.requeue else "suspended (slots free, memory held)"
            self._keep(job.id, (event.at, "preempted", f"by job {event.by}: {how}"))
            self._keep(
                event.by,
                (
                    event.at,
                    "preempting",
                    f"job {job.id} on {job.host} is "
                    f"{'requeued' if event.requeue else 'suspended'} for it",
                ),
            )
        elif isinstance(event, ev.JobModified):
            spec = event.spec  # the pre-image of a pending job is not kept: say the result
            self._keep(
                job.id,
                (
                    event.at,
                    "modified",
                    f"now queue {spec.queue}, priority "
                    f"{'default' if spec.priority is None else spec.priority}, "
                    f"{spec.slots} slots, walltime {spec.walltime_s or '-'} s, "
                    f"name {spec.name or '-'}",
                ),
            )
        elif isinstance(event, ev.JobHostLost):
            if event.requeue:
                self._earlier_attempt(job, before)
                self._keep(job.id, (event.at, "host_lost", job.reason))
                self._keep(job.id, (event.at, "requeued", f"attempt {job.attempt} waits"))
            else:
                self._keep(
                    job.id,
                    (event.at, "host_lost", f"{job.reason}; the queue's policy ends the job"),
                )
        self._last[job.id] = job
        self._last.move_to_end(job.id)
        if len(self._last) > PRE_IMAGES:
            self._last.popitem(last=False)

    def _earlier_attempt(self, job: JobRecord, before: JobRecord | None) -> None:
        """Keep the start and end of the attempt a requeue just erased from the record."""
        if before is None or before.attempt != job.attempt - 1:
            return  # its record is no longer known; the requeue entry still says it
        for entry in (_started(before), _ended(before)):
            if entry is not None:
                self._keep(job.id, entry)

    def _keep(self, key: str, entry: Entry) -> None:
        kept = self.kept.setdefault(key, [])
        # In time order (an earlier attempt's start arrives at its requeue); kept entries
        # always have a time.
        kept.insert(bisect.bisect_right(kept, entry[0] or 0.0, key=_time), entry)
        if len(kept) > MAX_ENTRIES:
            del kept[0]

    def prune(self) -> None:
        """Forget entries of jobs and arrays that retention removed from the state."""
        state = self.state
        for key in list(self.kept):
            if key in state.jobs or (key.isdigit() and int(key) in state.arrays):
                continue
            del self.kept[key]

    # --- reading ------------------------------------------------------------------------

    def _submitted(self, spec: Any, at: float, what: str = "") -> Entry:
        detail = f"{what}to queue {spec.queue} by {spec.user}"
        if spec.submit_host:
            detail += f" from {spec.submit_host}"
        if spec.hold:
            detail += ", held"
        return (at, "submitted", detail)

    def job_entries(self, job: JobRecord) -> list[dict[str, Any]]:
        """The history of one job or task, oldest first."""
        what = f"as a task of job array {job.number} " if job.array_index is not None else ""
        own = self.kept.get(job.id, [])
        # (time to sort by, rank among equal times, entry): an earlier attempt's end comes
        # before a start at the same instant, a lost host before the end it caused.
        rows: list[tuple[float, int, Entry]] = [
            (job.submit_time, 0, self._submitted(job.spec, job.submit_time, what))
        ]
        if job.array_index is not None:
            times = [e[0] for e in own if e[0] is not None]
            times += [t for t in (job.start_time, job.end_time) if t is not None]
            first = min(times, default=float("inf"))
            rows += [
                (_time(e), 1, e) for e in self.kept.get(str(job.number), []) if _time(e) <= first
            ]
        rows += [(_time(e), 1 if e[1] in _EARLIER else 3, e) for e in own]
        started, ended = _started(job), _ended(job)
        if started is not None:
            rows.append((started[0] or 0.0, 2, started))
        if ended is not None:
            rows.append((ended[0] or 0.0, 4, ended))
        if job.submit_time < self.since:
            rows += self._recovered(job, own)
        rows.sort(key=lambda r: (r[0], r[1]))
        return [_view(entry) for _, _, entry in rows]

    def _recovered(self, job: JobRecord, own: list[Entry]) -> list[tuple[float, int, Entry]]:
        """What the record of a job older than this controller shows happened before it
        started, with no time: placed just before the restart."""
        before = self.since - 1e-6
        out: list[tuple[float, int, Entry]] = []
        requeues = sum(1 for e in own if e[1] == "requeued")
        if job.attempt > requeues:
            detail = f"{job.attempt - requeues} earlier attempt(s) {UNKNOWN}"
            at = min(before, job.start_time) if job.start_time is not None else before
            out.append((at, 1, (None, "requeued", detail)))
        start = job.start_time
        if start is None or start < self.since:
            # A resume recorded with no suspend before it, or a suspension in force that
            # no entry explains, was suspended before the restart.
            switches = [
                e[1]
                for e in own
                if e[1] in ("suspended", "resumed") and (start is None or _time(e) >= start)
            ]
            if switches:
                suspended = switches[0] == "resumed"
            elif start is None:
                suspended = job.state is JobState.PSUSP
            else:
                suspended = job.state in (JobState.USUSP, JobState.SSUSP)
            if suspended and not (start is None and job.spec.hold):
                out.append((before, 3, (None, "suspended", UNKNOWN)))
        if job.kill_requested and not any(e[1] == "kill_requested" for e in own):
            out.append((before, 3, (None, "kill_requested", UNKNOWN)))
        return out

    def array_entries(self, array: ArrayRecord) -> list[dict[str, Any]]:
        """The history of a whole array: its submission and array-wide actions."""
        what = f"job array [{array.indices.describe()}] "
        out = [self._submitted(array.spec, array.submit_time, what)]
        out += self.kept.get(str(array.id), [])
        return [_view(e) for e in out]


def _time(entry: Entry) -> float:
    return entry[0] or 0.0
