"""Preemption (LSF preemptive queues, Slurm PreemptType=partition_prio), pure.

Runs after a scheduling pass (`pipeline.plan`) on the same snapshot and the pass's plan:

1. **Resume.** A job suspended by a preemption (SSUSP with `preempted_by`) holds no slots,
   only its memory. Once its host has its slots free again after the pass's placements, it
   is resumed (oldest start first); the pass placed what waited first, so a job that could
   preempt it again had its chance at those slots already.
2. **Preempt.** A job the pass left waiting for slots or memory, in a queue with
   `preempt = [...]`, looks at the running jobs of those queues. On each host that could
   ever run it (the queue's filters) it takes victims most recently (re)started first until
   the host's free slots (and memory: a suspended victim keeps its memory, a requeued one
   frees it) are enough; the host needing the fewest victims wins (then host order). A
   victim that has run (since its start or last resume) less than the preempting queue's
   `preempt_min_run_s` is not taken: no thrashing. Victims already on their way out for
   a preemption (requeue asked, attempt not ended yet) count as freeing their slots, so a
   waiting job does not take more victims while it waits for them.

`preempt_mode = "suspend"` suspends victims (SSUSP: the worker freezes them) and the
preemptor starts in the next pass; `"requeue"` kills them and queues them again (their
next attempt starts from the beginning); the preemptor starts once they have ended.
The decision is a list of events for the service to commit (`JobPreempted`, `JobResumed`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from xce.core.model import JobSpec
from xce.sched import reasons as why
from xce.sched.plugins import PluginRegistry, builtin
from xce.sched.reasons import WaitKind, WaitReason
from xce.sched.snapshot import PendingJob, RunningJob, Snapshot
from xce.sched.types import Plan


@dataclass(frozen=True, slots=True)
class Preempt:
    """Suspend (or requeue) `victim` to make room for `by` on `host`."""

    victim: str
    by: str
    host: str
    requeue: bool


@dataclass(slots=True)
class Decision:
    preempt: list[Preempt] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)
    reasons: dict[str, WaitReason] = field(default_factory=dict)


def needed(snapshot: Snapshot) -> bool:
    """Whether a pass on `snapshot` can have anything to preempt or resume (cheap)."""
    return any(q.preempt for q in snapshot.queues.values()) or any(
        r.state == "SSUSP" and r.preempted_by for r in snapshot.running
    )


def resume_first(snapshot: Snapshot) -> tuple[list[str], Snapshot]:
    """Victims to resume *before* the pass, and the snapshot without their slots: a
    suspended job goes back ahead of the jobs queued behind it (as in Slurm), unless a job
    of a queue that may preempt it is waiting (that one gets the slots first: the
    resume after the pass takes what it leaves)."""
    stopped = [
        r for r in snapshot.running if r.state == "SSUSP" and r.preempted_by and not r.ending
    ]
    if not stopped:
        return [], snapshot
    waiting = {j.spec.queue for j in snapshot.jobs} | {a.spec.queue for a in snapshot.arrays}
    waiting |= {name for name, jobs in (snapshot.queued or {}).items() if jobs}
    hungry = {victim for name in waiting for victim in snapshot.queues[name].preempt}
    free = {h.name: h.free_slots for h in snapshot.hosts}
    resumed: list[str] = []
    for job in sorted(stopped, key=lambda r: (r.start_time, r.job_id)):
        if job.queue in hungry or not _online(snapshot, job.host):
            continue
        if free.get(job.host, 0) >= job.asked_slots:
            free[job.host] -= job.asked_slots
            resumed.append(job.job_id)
    if not resumed:
        return [], snapshot
    hosts = tuple(dataclasses.replace(h, free_slots=free[h.name]) for h in snapshot.hosts)
    done = set(resumed)
    running = tuple(
        dataclasses.replace(r, state="RUN") if r.job_id in done else r for r in snapshot.running
    )
    return resumed, dataclasses.replace(snapshot, hosts=hosts, running=running)


def decide(
    snapshot: Snapshot, now: float, plan: Plan, registry: PluginRegistry | None = None
) -> Decision:
    """What to resume and whom to preempt after `plan` (see the module docstring);
    `registry` is the one the pass used (its filters say which hosts a queue may use)."""
    decision = Decision()
    hosts = {h.name: h for h in snapshot.hosts}
    free = {h.name: h.free_slots for h in snapshot.hosts}
    free_mem = {h.name: h.free_memory_mb for h in snapshot.hosts}
    placed = plan.placements
    specs = {j.job_id: j.spec for j in snapshot.pending_jobs()} if placed else {}
    arrays = {a.number: a.spec for a in snapshot.arrays}
    for placement in placed:
        spec = specs.get(placement.job_id)
        if spec is None:
            spec = arrays.get(int(placement.job_id.split("[", 1)[0]))
        if spec is not None:
            free[placement.host] -= spec.slots
            free_mem[placement.host] -= spec.memory_mb
    _resume(snapshot, decision, free)
    if any(q.preempt for q in snapshot.queues.values()):
        _preempt(snapshot, now, plan, decision, hosts, free, free_mem, registry or builtin())
    return decision


def _resume(snapshot: Snapshot, decision: Decision, free: dict[str, int]) -> None:
    stopped = sorted(
        (r for r in snapshot.running if r.state == "SSUSP" and r.preempted_by and not r.ending),
        key=lambda r: (r.start_time, r.job_id),
    )
    for job in stopped:
        want = job.asked_slots
        if free.get(job.host, 0) >= want and _online(snapshot, job.host):
            free[job.host] -= want
            decision.resume.append(job.job_id)


def _online(snapshot: Snapshot, host: str) -> bool:
    return any(h.name == host and h.schedulable for h in snapshot.hosts)


def _preempt(
    snapshot: Snapshot,
    now: float,
    plan: Plan,
    decision: Decision,
    hosts: dict,
    free: dict[str, int],
    free_mem: dict[str, int],
    registry: PluginRegistry,
) -> None:
    queues = snapshot.queues
    preempting = {name for name, q in queues.items() if q.preempt}
    # only the queues that preempt are read (`queued` holds pending jobs per queue)
    pending = [j for j in snapshot.jobs if j.spec.queue in preempting]
    for name in preempting:
        pending.extend((snapshot.queued or {}).get(name, ()))
    reasons = plan.reasons
    waiting = [
        j for j in pending if (r := reasons.get(j.job_id)) is not None and r.kind is WaitKind.ROOM
    ]
    waiting.sort(
        key=lambda j: (-queues[j.spec.queue].priority, j.number, -1 if j.index is None else j.index)
    )
    by_host: dict[str, list[RunningJob]] = {}
    coming: dict[str, int] = {}  # slots of victims already on their way out
    for run in snapshot.running:
        if run.ending and run.preempted_by:
            coming[run.host] = coming.get(run.host, 0) + run.slots
        elif run.state == "RUN" and not run.ending:
            by_host.setdefault(run.host, []).append(run)
    taken: set[str] = set()
    # Within a pass victims only get fewer and free room only shrinks: a shape that found
    # no host stays without one (as the pass's `PassTallies.blocked`), so each shape fails once,
    # and each (queue, resources) filters the hosts once.
    failed: set[tuple] = set()
    eligible: dict[tuple[str, str], list[str]] = {}
    for job in waiting:
        spec = job.spec
        shape = (spec.queue, spec.slots, spec.memory_mb, spec.resources)
        if shape in failed:
            continue
        key = (spec.queue, spec.resources)
        names = eligible.get(key)
        if names is None:
            queue = queues[spec.queue]
            filters = registry.policy_for(queue.plugins).filters
            names = eligible[key] = [
                name
                for name, host in hosts.items()
                if all(check.accepts(host, spec, queue) for check in filters)
            ]
        if not _one(
            snapshot, now, job, decision, names, hosts, free, free_mem, by_host, coming, taken
        ):
            failed.add(shape)


def _take(
    ordered: list[RunningJob], spec: JobSpec, requeue: bool, slots: int, mem: int
) -> list[RunningJob] | None:
    """Victims from the front of `ordered` until the job fits; None if it never does."""
    chosen: list[RunningJob] = []
    for victim in ordered:
        if slots >= spec.slots and mem >= spec.memory_mb:
            break
        chosen.append(victim)
        slots += victim.slots
        if requeue:
            mem += victim.memory_mb
    if slots < spec.slots or mem < spec.memory_mb or not chosen:
        return None
    return chosen


def _one(
    snapshot: Snapshot,
    now: float,
    job: PendingJob,
    decision: Decision,
    names: list[str],
    hosts: dict,
    free: dict[str, int],
    free_mem: dict[str, int],
    by_host: dict[str, list[RunningJob]],
    coming: dict[str, int],
    taken: set[str],
) -> bool:
    """Preempt for `job` on the best of `names` (hosts its queue may use); False when no
    host can make room for it."""
    spec = job.spec
    queue = snapshot.queues[spec.queue]
    requeue = queue.preempt_mode == "requeue"
    best: tuple[int, str, list[RunningJob]] | None = None
    for name in names:
        host = hosts[name]
        if host.slots < spec.slots or host.memory_mb < spec.memory_mb:
            continue
        if free[name] + coming.get(name, 0) >= spec.slots and free_mem[name] >= spec.memory_mb:
            decision.reasons[job.job_id] = why.preempted_ending(name)
            return True
        candidates = [
            r
            for r in by_host.get(name, ())
            if r.job_id not in taken
            and r.queue in queue.preempt
            and now - r.since >= queue.preempt_min_run_s
        ]
        # as few victims as will do (largest first is the fewest), and among as few, the
        # most recently started: the recency order when it needs no more victims than that
        recent = _take(
            sorted(candidates, key=lambda r: (-r.since, r.job_id)),
            spec,
            requeue,
            free[name],
            free_mem[name],
        )
        fewest = _take(
            sorted(candidates, key=lambda r: (-r.slots, -r.since, r.job_id)),
            spec,
            requeue,
            free[name],
            free_mem[name],
        )
        options = [c for c in (recent, fewest) if c]
        if not options:
            continue
        chosen = min(options, key=len)  # `recent` first: it wins a tie
        if best is None or len(chosen) < best[0]:
            best = (len(chosen), name, chosen)
            if len(chosen) == 1:
                break  # no host can do with fewer
    if best is None:
        return False
    _, name, chosen = best
    for victim in chosen:
        taken.add(victim.job_id)
        decision.preempt.append(Preempt(victim.job_id, job.job_id, name, requeue))
        free[name] += victim.slots
        if requeue:
            free_mem[name] += victim.memory_mb
    # the room is the preemptor's: no other waiting job counts on it in this pass
    free[name] -= spec.slots
    free_mem[name] -= spec.memory_mb
    decision.reasons[job.job_id] = why.preempting(tuple(v.job_id for v in chosen), name, requeue)
    return True
