"""Replay a workload in virtual time through the live scheduler: `xce simulate`.

The simulator drives a real `ClusterState` with the same events the controller commits
(HostRegistered, JobSubmitted, JobStarted, JobFinished) and asks the same
`pipeline.plan(snapshot_of(state, usage, groups), now)` for placements, so a policy behaves
here as it does live. At each instant, in this order: jobs reaching their end finish (a job
whose run time exceeds its requested time is killed at the requested time, like a real
cluster enforcing walltime), new jobs are submitted, then one scheduling pass runs if a host
has room. Hosts are `hosts` identical machines of `slots` slots; a job of `p` processors
wider than one host is packed on ceil(p / slots) hosts (`span[ptile=slots]`, issue 15), so
`--hosts N --slots 1` and `--hosts 1 --slots N` decide alike; only a job wider than the
whole machine is skipped.

Metrics, as papers on the Parallel Workloads Archive give them: average and median wait
(start - submit), average bounded slowdown `max(1, (wait + run) / max(run, tau))` with
tau = 10 s, utilisation (busy slot-seconds over slots x makespan) and makespan (last end -
first submit); `detail()` breaks wait and slowdown down by job size (powers of two).

Speed: each applied event also feeds a `SnapshotCache` (xce/sched/incremental.py), so a
pass sees what changed since the last one instead of a fresh walk of every pending job, and
the pass runs with `explain=False` (no reason for every waiting job), so it stops as soon
as nothing more can start. Under strict FCFS (one queue, fcfs order) a pass that blocked is
not repeated until a job ends: what arrives meanwhile queues behind the blocked job.
bench/refsim.py is the yardstick (`python -m bench`, figure 8).
"""

from __future__ import annotations

import csv
import heapq
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xce.core import events as ev
from xce.core.model import HostStatus, JobSpec, QueueRecord, ReservationRecord
from xce.core.state import ClusterState
from xce.sched.advance import wake_times
from xce.sched.incremental import SnapshotCache
from xce.sched.pipeline import plan
from xce.sched.plugins import builtin
from xce.sched.plugins.base import blocks_queue, reads_usage, submission_order
from xce.sched.swf import SwfJob
from xce.sched.types import Placement
from xce.sched.usage import UsageLedger

TAU_S = 10.0
HOST_MEMORY_MB = 1 << 30  # traces rarely give memory; hosts never run out
PRESETS: dict[str, tuple[str, ...]] = {
    "fcfs": ("strict",),  # textbook FCFS: a waiting job blocks all behind it
    "first-fit": (),  # the live default: later jobs that fit may go ahead, no reservation
    "easy": ("backfill",),
    "fairshare": ("fairshare", "backfill"),
    "fairshare-group": ("fairshare-group", "backfill"),
}


def plugins_for(policy: str) -> tuple[str, ...]:
    """A preset name or a comma-separated plugin list; ValueError names what is unknown."""
    if policy in PRESETS:
        return PRESETS[policy]
    names = tuple(p.strip() for p in policy.split(",") if p.strip())
    if not names:
        raise ValueError(f"policy {policy!r} is empty")
    try:
        builtin().policy_for(names)  # the simulator runs the built-in plugins
    except ValueError as exc:
        raise ValueError(f"policy {policy!r}: {exc} (presets: {', '.join(PRESETS)})") from None
    return names


def host_names(hosts: int) -> list[str]:
    width = len(str(hosts))
    return [f"n{i:0{width}d}" for i in range(1, hosts + 1)]


def parse_reservation(text: str, number: int, origin: float, hosts: int) -> ReservationRecord:
    """`FROM-TO[@HOST,...][/SLOTS]` (seconds after `origin`, the trace's first submit; all
    hosts when none are named; whole hosts unless SLOTS per host) as a maintenance
    reservation named `rsv<number>`: no trace job targets it, so it only keeps jobs off.
    ValueError names what is wrong."""
    body, _, slots_text = text.partition("/")
    window, _, host_text = body.partition("@")
    begin, sep, finish = window.partition("-")
    try:
        start, end = float(begin), float(finish)
        slots = int(slots_text) if slots_text else 0
    except ValueError:
        raise ValueError(
            f"--reservation {text!r}: expected FROM-TO[@HOST,...][/SLOTS], "
            "times in seconds after the first submit"
        ) from None
    if not sep or start < 0 or end <= start:
        raise ValueError(f"--reservation {text!r}: give FROM-TO with FROM >= 0 and TO > FROM")
    if slots < 0:
        raise ValueError(f"--reservation {text!r}: SLOTS may not be negative")
    known = host_names(hosts)
    chosen = (
        tuple(h.strip() for h in host_text.split(",") if h.strip()) if host_text else tuple(known)
    )
    for host in chosen:
        if host not in known:
            raise ValueError(
                f"--reservation {text!r}: no host {host} (hosts are {known[0]}..{known[-1]})"
            )
    return ReservationRecord(
        f"rsv{number}",
        chosen,
        origin + start,
        origin + end,
        slots,
        maintenance=True,
        flags=("overlap",),
    )


def spec_for(job: SwfJob, queue: str = "normal", slots: int | None = None) -> JobSpec:
    """The job as submitted; one wider than a host of `slots` is packed on hosts."""
    wide = slots is not None and job.procs > slots
    return JobSpec(
        user=job.user,
        queue=queue,
        name=f"swf-{job.number}",
        command=f"swf job {job.number}",
        slots=job.procs,
        walltime_s=job.requested_time,
        gres=(("gpu", str(job.gpus)),) if job.gpus else (),
        resources=f"span[ptile={slots}]" if wide else "",
    )


def executed_time(job: SwfJob) -> float:
    """How long the job occupies its slots: its run time, cut at its requested time."""
    if job.requested_time is not None and job.run_time > job.requested_time:
        return float(job.requested_time)
    return job.run_time


@dataclass(slots=True)
class Outcome:
    job: SwfJob
    job_id: str
    host: str = ""
    start: float | None = None
    end: float | None = None

    @property
    def wait(self) -> float:
        """Start - submit, of a job that started."""
        if self.start is None:
            raise ValueError(f"job {self.job.number} has not started")
        return self.start - self.job.submit

    @property
    def killed(self) -> bool:
        return self.job.requested_time is not None and self.job.run_time > self.job.requested_time


@dataclass
class SimResult:
    policy: str
    plugins: tuple[str, ...]
    hosts: int
    slots: int
    outcomes: list[Outcome]
    skipped: int
    passes: int = 0
    seconds: float = 0.0
    # (time, trace job number, host) of every start, in decision order
    decisions: list[tuple[float, int, str]] = field(default_factory=list)

    def done(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.start is not None and o.end is not None]

    def metrics(self) -> dict[str, Any]:
        done = self.done()
        n = len(done)
        waits = [o.wait for o in done]
        bsld = [bounded_slowdown(w, o) for w, o in zip(waits, done, strict=True)]
        first = min((o.job.submit for o in done), default=0.0)
        last = max((o.end for o in done if o.end is not None), default=0.0)
        makespan = last - first
        busy = sum(o.job.procs * executed_time(o.job) for o in done)
        capacity = self.hosts * self.slots * makespan
        return {
            "policy": self.policy,
            "plugins": list(self.plugins),
            "hosts": self.hosts,
            "slots_per_host": self.slots,
            "jobs": n,
            "skipped": self.skipped,
            "killed": sum(1 for o in done if o.killed),
            "avg_wait_s": sum(waits) / n if n else 0.0,
            "median_wait_s": statistics.median(waits) if n else 0.0,
            "avg_bounded_slowdown": sum(bsld) / n if n else 0.0,
            "utilisation": busy / capacity if capacity else 0.0,
            "makespan_s": makespan,
            "passes": self.passes,
            "sim_seconds": self.seconds,
            "jobs_per_s": n / self.seconds if self.seconds else 0.0,
        }

    def detail(self) -> list[dict[str, Any]]:
        """Wait and slowdown per job-size class (1, 2, 3-4, 5-8, ... slots)."""
        classes: dict[int, list[Outcome]] = {}
        for o in self.done():
            classes.setdefault((o.job.procs - 1).bit_length(), []).append(o)
        rows = []
        for bits in sorted(classes):
            members = classes[bits]
            low, high = (1 << (bits - 1)) + 1 if bits else 1, 1 << bits
            waits = [o.wait for o in members]
            rows.append(
                {
                    "size": str(high) if low == high else f"{low}-{high}",
                    "jobs": len(members),
                    "avg_wait_s": sum(waits) / len(waits),
                    "median_wait_s": statistics.median(waits),
                    "avg_bounded_slowdown": sum(
                        bounded_slowdown(w, o) for w, o in zip(waits, members, strict=True)
                    )
                    / len(members),
                }
            )
        return rows

    def write_csv(self, handle: Any, header: bool = True) -> None:
        """One row per job that ran: what a site plots (start times, waits, hosts)."""
        out = csv.writer(handle)
        if header:
            out.writerow(
                (
                    "policy",
                    "job",
                    "user",
                    "procs",
                    "submit",
                    "start",
                    "end",
                    "wait",
                    "host",
                    "killed",
                )
            )
        for o in self.outcomes:
            if o.start is None:
                continue
            out.writerow(
                (
                    self.policy,
                    o.job.number,
                    o.job.user,
                    o.job.procs,
                    _num(o.job.submit),
                    _num(o.start),
                    _num(o.end),
                    _num(o.start - o.job.submit),
                    o.host,
                    int(o.killed),
                )
            )


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def bounded_slowdown(wait: float, outcome: Outcome) -> float:
    ran = executed_time(outcome.job)
    return max(1.0, (wait + ran) / max(ran, TAU_S))


def any_free_host(state: ClusterState) -> bool:
    """The controller's own test (ControllerService._any_free_host) for skipping a pass."""
    for host in state.hosts.values():
        if host.status is HostStatus.ONLINE:
            load = state.host_load.get(host.name)
            if load is None or load.slots < host.slots:
                return True
    return False


def max_free_slots(state: ClusterState) -> int:
    """The most free slots on one online host: a pass can start no job that needs more on
    every host it would use (a job wider than a host needs a whole free one)."""
    best = 0
    for host in state.hosts.values():
        if host.status is HostStatus.ONLINE:
            load = state.host_load.get(host.name)
            free = host.slots - (load.slots if load is not None else 0)
            if free > best:
                best = free
    return best


class _Needs:
    """Pending jobs counted by the slots each needs on its most loaded host (min(procs,
    slots)), with the smallest kept: when even it exceeds every host's free slots, no
    policy can start anything (plugins only restrict, the simulator does not preempt), so
    the pass is skipped without building a snapshot. A skipped pass would have placed
    nothing, so the results are the same."""

    __slots__ = ("counts", "least")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.least = 0  # 0: none pending

    def add(self, need: int) -> None:
        self.counts[need] = self.counts.get(need, 0) + 1
        if not self.least or need < self.least:
            self.least = need

    def remove(self, need: int) -> None:
        left = self.counts[need] - 1
        if left:
            self.counts[need] = left
            return
        del self.counts[need]
        if need == self.least:
            self.least = min(self.counts) if self.counts else 0


def simulate(
    jobs: list[SwfJob],
    hosts: int,
    slots: int,
    policy: str = "first-fit",
    half_life_s: float = 3600.0,
    skipped: int = 0,
    progress: Callable[[int], None] | None = None,
    gpus_per_host: int = 0,
    reservations: Sequence[ReservationRecord] = (),
) -> SimResult:
    """Replay `jobs` (sorted by submit time) on `hosts` x `slots`; see the module doc.
    `progress`, if given, is called now and then with the number of jobs ended so far.
    `reservations` (absolute times, host names of `host_names`) are added before the first
    job, and a pass runs at each of their starts and ends (nothing else would wake one)."""
    plugins = plugins_for(policy)
    started = time.perf_counter()
    result = SimResult(policy, plugins, hosts, slots, [], skipped)
    replay = _Replay(jobs, result, half_life_s, gpus_per_host, reservations)
    replay.run(progress)
    result.seconds = time.perf_counter() - started
    if progress is not None:
        progress(replay.ended)
    return result


def _cluster(
    first: float,
    plugins: tuple[str, ...],
    hosts: int,
    slots: int,
    gpus_per_host: int,
    reservations: Sequence[ReservationRecord],
) -> ClusterState:
    """The simulated cluster at the first submit: one queue, the hosts, the reservations."""
    state = ClusterState()
    state.apply(ev.QueueCreated(first, QueueRecord("normal", plugins=plugins)))
    for name in host_names(hosts):
        devices = (("gpu", ",".join(map(str, range(gpus_per_host)))),) if gpus_per_host else ()
        state.apply(ev.HostRegistered(first, name, slots, HOST_MEMORY_MB, (), devices))
    for reservation in reservations:
        state.apply(ev.ReservationAdded(first, reservation))
    return state


class _Replay:
    """One run of `simulate`: the cluster, the scheduler's cached view, and the agenda.

    The agenda is one heap of (time, kind, seq, payload): kind 0 a job ends (payload its
    Outcome), 1 a job arrives (its SwfJob), 2 a reservation starts or ends; at one instant
    ends come first, then arrivals, then one pass (module doc)."""

    def __init__(
        self,
        jobs: list[SwfJob],
        result: SimResult,
        half_life_s: float,
        gpus_per_host: int,
        reservations: Sequence[ReservationRecord],
    ) -> None:
        self.result, self.hosts, self.slots = result, result.hosts, result.slots
        first = jobs[0].submit if jobs else 0.0
        self.state = _cluster(
            first, result.plugins, self.hosts, self.slots, gpus_per_host, reservations
        )
        self.cache = SnapshotCache()  # the scheduler's view, updated by each event applied
        self.ledger = UsageLedger(half_life_s)
        self.groups = {j.user: j.group for j in jobs}
        queue_policy = builtin().policy_for(result.plugins)
        self.fair = reads_usage(queue_policy.order)  # usage is read by fairshare only
        # Strict FCFS in the one queue: after a pass blocked at a job, jobs that arrive
        # sort behind it, so until a job ends (or it starts) no pass can start anything.
        self.strict_fcfs = (
            submission_order(queue_policy.order)
            and not self.fair
            and blocks_queue(queue_policy.reserve)
        )
        self.blocked = False
        self.agenda: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self._fill(jobs, gpus_per_host, wake_times(reservations, first))
        self.ended = 0
        self.needs = _Needs()
        self.by_id: dict[str, Outcome] = {}
        # Strict FCFS: the pending jobs in submission order; a pass starts nothing unless
        # the first of them fits (BlockEverything stops the pass at the first that does not).
        self.line: deque[Outcome] = deque()

    def _fill(self, jobs: list[SwfJob], gpus_per_host: int, wakes: Sequence[float]) -> None:
        """Every arrival and reservation wake-up on the agenda; jobs that cannot run are
        counted as skipped: wider than the machine, or asking GPUs the hosts lack or GPUs
        on a job wider than a host (not granted across hosts)."""
        slots, width = self.slots, self.slots * self.hosts
        for job in jobs:
            if job.procs > width or job.gpus > gpus_per_host or (job.gpus and job.procs > slots):
                self.result.skipped += 1
                continue
            self.agenda.append((job.submit, 1, self.seq, job))
            self.seq += 1
        for at in wakes:
            self.agenda.append((at, 2, self.seq, None))
            self.seq += 1
        heapq.heapify(self.agenda)

    def run(self, progress: Callable[[int], None] | None) -> None:
        agenda, pop, end, arrive = self.agenda, heapq.heappop, self._end, self._arrive
        while agenda:
            now = agenda[0][0]
            while agenda and agenda[0][0] == now:
                _, kind, _, payload = pop(agenda)
                if kind == 0:
                    end(payload, now)
                    if progress is not None and not self.ended % 1024:
                        progress(self.ended)
                elif kind == 1:
                    arrive(payload, now)
                else:  # a reservation starts or ends
                    self.blocked = False
            if self._may_start():
                self._pass(now)

    def _end(self, outcome: Outcome, now: float) -> None:
        self.blocked = False
        if outcome.killed:
            event = ev.JobFinished(now, outcome.job_id, 0, None, 9, reason="walltime exceeded")
        else:
            event = ev.JobFinished(now, outcome.job_id, 0, 0)
        self.state.apply(event)
        if self.fair:
            self.ledger.observe(event, self.state)
        self.cache.observe(event, self.state)
        outcome.end = now
        self.ended += 1

    def _arrive(self, job: SwfJob, now: float) -> None:
        state = self.state
        number = state.next_number
        event = ev.JobSubmitted(now, number, spec_for(job, slots=self.slots))
        state.apply(event)
        self.cache.observe(event, state)
        outcome = Outcome(job, str(number))
        self.needs.add(min(job.procs, self.slots))
        if self.strict_fcfs:
            self.line.append(outcome)
        self.by_id[outcome.job_id] = outcome
        self.result.outcomes.append(outcome)

    def _may_start(self) -> bool:
        """Whether a pass could start anything: a job waits, it is not a strict FCFS pass
        that already blocked, and the smallest need (under strict FCFS: the head's) fits
        the freest host. Every host is online and has `slots`, so the freest is read from
        the loads alone."""
        least = self.needs.least
        if self.blocked or not least:
            return False
        slots, loads = self.slots, self.state.host_load
        free = slots if len(loads) < self.hosts else slots - min(x.slots for x in loads.values())
        if least > free:
            return False
        return not (self.strict_fcfs and min(self.line[0].job.procs, slots) > free)

    def _pass(self, now: float) -> None:
        """One scheduling pass through the live pipeline, and its starts applied."""
        usage = self.ledger.usage(now) if self.fair else None
        decided = plan(self.cache.snapshot(self.state, usage, self.groups), now, explain=False)
        self.result.passes += 1
        self.blocked = self.strict_fcfs and any(r["host"] == "*" for r in decided.reservations)
        for placement in decided.placements:
            self._start(placement, now)

    def _start(self, placement: Placement, now: float) -> None:
        event = ev.JobStarted(
            now, placement.job_id, placement.host, placement.devices, placement.hosts
        )
        self.state.apply(event)
        self.cache.observe(event, self.state)
        outcome = self.by_id.pop(placement.job_id)
        job = outcome.job
        self.needs.remove(min(job.procs, self.slots))
        if self.strict_fcfs:
            if self.line[0] is outcome:
                self.line.popleft()  # strict order starts jobs from the head
            else:
                self.line.remove(outcome)
        parts = placement.hosts
        where = "+".join(p.host for p in parts) if len(parts) > 1 else placement.host
        outcome.start, outcome.host = now, where
        self.result.decisions.append((now, job.number, where))
        heapq.heappush(self.agenda, (now + executed_time(job), 0, self.seq, outcome))
        self.seq += 1
