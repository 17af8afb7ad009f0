"""Scheduling figures: one full pass over 10k / 100k pending jobs and 1k / 10k hosts, with
and without backfill and resource expressions; `xce simulate` against the reference
simulator of bench/refsim.py, per policy.

Snapshots are built directly (not through ClusterState) so that the figure is the pass
itself; `snapshot_of` on a 100k-pending state is reported as a row of its own.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import replace
from typing import Any

from bench.common import Plan as BenchPlan
from bench.common import Row, verdict
from xce.core.deps import DepStatus
from xce.core.model import JobSpec, QueueRecord
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import HostView, PendingJob, RunningJob, Snapshot

NOW = 1_000_000.0
SLOTS, MEMORY = 16, 64_000
EXPRESSIONS = (
    "",
    "select[type==X86 && maxmem>=32000] order[-slots]",
    "select[rack==r1 || rack==r2 || rack==r3]",
    "select[!defined(gpu)] order[ut]",
)


# Multi-host shapes: wider than a 16-slot host, by ptile or with no span.
WIDE = ((32, "span[ptile=16]"), (24, "span[ptile=8]"), (64, "span[ptile=16]"), (48, ""))


def cluster(
    pending: int,
    hosts: int,
    plugins: tuple[str, ...],
    expressions: bool,
    seed: int = 1,
    multihost: bool = False,
) -> Snapshot:
    """`hosts` hosts of 16 slots, each half busy with jobs ending within 2 h, and `pending`
    jobs of 1-16 slots (20 shapes, plus 4 resource strings when `expressions`); with
    `multihost`, 4 of the 20 shapes (20 % of the jobs) span 2-4 hosts."""
    rng = random.Random(seed)
    views, running = [], []
    for i in range(hosts):
        name = f"h{i:05d}"
        attrs = (("rack", f"r{i % 20}"), ("type", "X86" if i % 4 else "ARM"), ("ut", str(i % 7)))
        busy = rng.choice((4, 8, 12))
        views.append(HostView(name, SLOTS, MEMORY, SLOTS - busy, MEMORY - busy * 1000, attrs, True))
        for k in range(busy // 4):
            running.append(
                RunningJob(
                    f"r{i}.{k}",
                    f"u{k}",
                    "normal",
                    name,
                    4,
                    4000,
                    NOW - rng.randrange(3600),
                    rng.choice((3600, 7200)),
                )
            )
    specs = []
    for k in range(20):
        resources = EXPRESSIONS[k % len(EXPRESSIONS)] if expressions else ""
        specs.append(
            JobSpec(
                user=f"u{k % 8}",
                queue="normal",
                command="x",
                slots=(1, 2, 4, 8, 16)[k % 5],
                memory_mb=(0, 1000, 4000)[k % 3],
                walltime_s=(600, 3600, 14400)[k % 3],
                resources=resources,
            )
        )
    if multihost:
        for k, (slots, span) in enumerate(WIDE):
            specs[k * 5] = replace(
                specs[k * 5], slots=slots, resources=f"{specs[k * 5].resources} {span}".strip()
            )
    jobs = tuple(
        PendingJob(str(n), n, None, rng.choice(specs), DepStatus.SATISFIED)
        for n in range(1, pending + 1)
    )
    queue = QueueRecord("normal", plugins=plugins)
    return Snapshot(tuple(views), {"normal": queue}, jobs, (), {}, tuple(running))


def timed(snapshot: Snapshot, repeats: int) -> tuple[float, float, int]:
    """(median wall seconds, median CPU seconds of this process, placements) of a pass.

    The verdict uses CPU time: the pass is single-threaded, so on an idle machine wall time
    equals it, while on a shared one wall time mostly measures the other processes."""
    walls, cpus, placed = [], [], 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = plan(snapshot, NOW)
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
        placed = len(result.placements)
    return statistics.median(walls), statistics.median(cpus), placed


def run(bench: BenchPlan) -> list[Row]:
    rows = []
    sizes = [(10_000, 1_000), (10_000, 10_000), (100_000, 1_000), (100_000, 10_000)]
    repeats = 1 if bench.quick else 3
    for plugins, label in (((), "first-fit"), (("backfill",), "EASY backfill")):
        for expressions in (False, True):
            for pending, hosts in sizes:
                snap = cluster(pending, hosts, plugins, expressions)
                wall, cpu, placed = timed(snap, repeats)
                big = (pending, hosts) == (100_000, 10_000)
                what = "+ expressions" if expressions else "no expressions"
                rows.append(
                    Row(
                        f"sched pass {pending // 1000}k pending x {hosts // 1000}k "
                        f"hosts, {label}, {what}",
                        f"cpu {cpu * 1000:,.0f} ms, wall {wall * 1000:,.0f} ms ({placed:,} placed)",
                        "< 1 s" if big else "-",
                        verdict(cpu < 1) if big else "info",
                        {"cpu_s": cpu, "wall_s": wall, "placed": placed},
                    )
                )
    snap = cluster(100_000, 10_000, ("backfill",), True, multihost=True)
    wall, cpu, placed = timed(snap, repeats)
    rows.append(
        Row(
            "sched pass 100k pending x 10k hosts, EASY backfill, + expressions, "
            "20 % multi-host jobs",
            f"cpu {cpu * 1000:,.0f} ms, wall {wall * 1000:,.0f} ms ({placed:,} placed)",
            "< 1 s",
            verdict(cpu < 1),
            {"cpu_s": cpu, "wall_s": wall, "placed": placed},
        )
    )
    rows.extend(_growth(repeats))
    rows.extend(_predictive_row(repeats))
    rows.extend(_snapshot_row(bench))
    rows.extend(_simulate_row(bench))
    return rows


def _growth(repeats: int) -> list[Row]:
    """How a pass grows with pending jobs (10k hosts) and with hosts (100k pending)."""
    by_jobs = [
        timed(cluster(n, 10_000, ("backfill",), True), repeats)[1]
        for n in (25_000, 50_000, 100_000)
    ]
    by_hosts = [
        timed(cluster(100_000, h, ("backfill",), True), repeats)[1] for h in (2_500, 5_000, 10_000)
    ]
    return [
        Row(
            "sched pass growth, 25k/50k/100k pending (10k hosts, EASY + expr)",
            "cpu " + " / ".join(f"{s * 1000:.0f}" for s in by_jobs) + " ms",
            "near linear",
            "info",
        ),
        Row(
            "sched pass growth, 2.5k/5k/10k hosts (100k pending, EASY + expr)",
            "cpu " + " / ".join(f"{s * 1000:.0f}" for s in by_hosts) + " ms",
            "-",
            "info",
        ),
    ]


def predictive_cluster(pending: int, hosts: int) -> tuple[Snapshot, Snapshot]:
    """The same cluster under EASY (`backfill`) and under `predictive`, whose snapshot
    carries run-time predictions: each user's last two jobs ran 300-2,400 s and 600 s, each
    running job started with its user's prediction, and the pending jobs were submitted
    over the last 1,000 s (none starving: the guard's sort is the ordinary one)."""
    from xce.sched.predict import RuntimeHistory

    easy = cluster(pending, hosts, ("backfill",), True)
    aged = tuple(
        replace(job, submit_time=NOW - (pending - k) * 1000 / pending)
        for k, job in enumerate(easy.jobs)
    )
    easy = replace(easy, jobs=aged)
    history = RuntimeHistory()
    for user in range(8):
        history.ended(f"u{user}", "", 300.0 * (user + 1))
        history.ended(f"u{user}", "", 600.0)
    for job in easy.running:
        spec = JobSpec(user=job.user, queue="normal", command="x", walltime_s=job.walltime_s)
        history.started(job.job_id, spec)
    queue = QueueRecord("normal", plugins=("predictive",))
    return easy, replace(easy, queues={"normal": queue}, predictions=history)


def submitted_one_by_one(easy: Snapshot) -> tuple[PendingJob, ...]:
    """`easy`'s pending jobs as the controller's views hold them when each job was
    submitted on its own, with a command of its own (a loop of `xce job submit`): through
    a ClusterState and its `SnapshotCache`, which hands jobs alike as a pass reads them one
    spec object (xce/sched/incremental.py), as the built snapshots share their 20."""
    from xce.core import events as ev
    from xce.core.state import ClusterState
    from xce.sched.incremental import SnapshotCache

    state, cache = ClusterState(), SnapshotCache()

    def apply(event: ev.Event) -> None:
        state.apply(event)
        cache.observe(event, state)

    apply(ev.QueueCreated(NOW, QueueRecord("normal")))
    cache.snapshot(state)
    for k, job in enumerate(easy.jobs):
        spec = replace(job.spec, command=f"./run {k}")
        apply(ev.JobSubmitted(job.submit_time, job.number, spec))
    queued = cache.snapshot(state).queued
    assert queued is not None
    return tuple(queued["normal"])


def _predictive_row(repeats: int) -> list[Row]:
    """The cost of a `predictive` pass (predictions, short-first order, shortest-first
    backfill) against EASY's on the same 100k pending x 10k hosts: at most 1.2x (medians
    of at least 5 alternating runs), on the built snapshot and on the controller's views
    of the same jobs submitted one by one."""
    easy, predictive = predictive_cluster(100_000, 10_000)
    rows = []
    for label in ("", ", jobs submitted one by one"):
        # (the views made only for their row: the objects a process holds slow every pass)
        jobs = submitted_one_by_one(easy) if label else easy.jobs
        a, b = replace(easy, jobs=jobs), replace(predictive, jobs=jobs)
        easy_cpus, cpus, placed = [], [], 0
        for _ in range(max(repeats, 5)):  # alternating, so both see the same machine
            gc.collect()
            easy_cpus.append(timed(a, 1)[1])
            gc.collect()
            _, cpu, placed = timed(b, 1)
            cpus.append(cpu)
        easy_cpu, cpu = statistics.median(easy_cpus), statistics.median(cpus)
        ratio = cpu / easy_cpu
        rows.append(
            Row(
                "sched pass 100k pending x 10k hosts, + expressions: predictive vs EASY "
                f"backfill{label}",
                f"cpu {cpu * 1000:,.0f} ms vs {easy_cpu * 1000:,.0f} ms = {ratio:.2f}x "
                f"({placed:,} placed)",
                "<= 1.2x",
                verdict(ratio <= 1.2),
                {"cpu_s": cpu, "easy_cpu_s": easy_cpu, "ratio": ratio, "placed": placed},
            )
        )
    return rows


def _snapshot_row(bench: BenchPlan) -> list[Row]:
    from xce.core import events as ev
    from xce.core.state import ClusterState
    from xce.sched.snapshot import snapshot_of

    state = ClusterState()
    state.apply(ev.QueueCreated(NOW, QueueRecord("normal")))
    for i in range(10_000):
        state.apply(ev.HostRegistered(NOW, f"h{i:05d}", SLOTS, MEMORY))
    spec = JobSpec(user="u1", queue="normal", command="x")
    for n in range(1, 100_001):
        state.apply(ev.JobSubmitted(NOW, n, replace(spec, slots=1 + n % 4)))
    started = time.process_time()
    snapshot_of(state)
    cold = time.process_time() - started
    memo: dict = {}
    snapshot_of(state, memo=memo)
    started = time.process_time()
    snapshot_of(state, memo=memo)
    warm = time.process_time() - started
    from xce.sched.incremental import SnapshotCache

    cache = SnapshotCache()
    cache.snapshot(state)  # the first one walks, as snapshot_of does
    submitted = ev.JobSubmitted(NOW, state.next_number, spec)
    state.apply(submitted)
    cache.observe(submitted, state)
    started = time.process_time()
    cache.snapshot(state)
    incremental = time.process_time() - started
    return [
        Row(
            "snapshot, 100k pending x 10k hosts (on the event loop): snapshot_of cold / "
            "with the memo / the controller's SnapshotCache after one submit",
            f"cpu {cold * 1000:,.0f} / {warm * 1000:,.0f} / {incremental * 1000:,.2f} ms",
            "-",
            "info",
        )
    ]


def _simulate_row(bench: BenchPlan) -> list[Row]:
    """`xce simulate` against the minimal event-driven simulator of bench/refsim.py, per
    policy, on a KTH-SP2-like trace (one 100-slot machine, 28k jobs; 3k in quick mode), on
    an overloaded one whose queue grows past a thousand jobs, and over 10 hosts of 10
    slots (the reference places a job on one host only): the KTH-like jobs of at most 10
    processors (a light load: every job starts as it comes, one pass each) and a trace
    that keeps the hosts 80-90 % busy; the waits must be the same (else ERROR)."""
    from bench.refsim import refsim
    from xce.sched.sim.simulate import simulate
    from xce.sched.sim.workload import synthetic

    count = 3_000 if bench.quick else 28_000
    runs = 3 if bench.quick else 5
    kth = synthetic(count, max_procs=100, seed=5, mean_interarrival_s=130)
    narrow = [job for job in kth if job.procs <= 10]
    traces = [  # (label, jobs, hosts, slots)
        (f"{count:,}-job KTH-like trace, 1 x 100 slots", kth, 1, 100),
        (
            "3,000-job overloaded trace (queues of 1k+ jobs), 1 x 64 slots",
            synthetic(3_000, max_procs=64, seed=5, mean_interarrival_s=20),
            1,
            64,
        ),
        (f"{len(narrow):,} KTH-like jobs of <= 10 procs, 10 x 10 slots", narrow, 10, 10),
        (
            "5,000-job trace of 1-10 procs, 10 x 10 slots (80-90 % busy)",
            synthetic(5_000, max_procs=10, seed=5, mean_interarrival_s=30),
            10,
            10,
        ),
    ]
    rows = []
    for label, jobs, hosts, slots in traces:
        for policy in ("fcfs", "first-fit", "easy", "fairshare"):
            rows.append(_versus(label, jobs, hosts, slots, policy, refsim, simulate, runs))
    return rows


def _versus(
    label: str,
    jobs: list,
    hosts: int,
    slots: int,
    policy: str,
    refsim: Any,
    simulate: Any,
    runs: int,
) -> Row:
    """Medians of `runs` CPU times of each, run alternately (the machine may be shared)."""
    theirs_s, ours_s = [], []
    for _ in range(runs):
        gc.collect()  # the previous run's garbage is not charged to this one
        cpu = time.process_time()  # CPU, not wall: the machine may be shared
        ref = refsim(jobs, hosts, slots, policy)
        theirs_s.append(time.process_time() - cpu)
        gc.collect()
        cpu = time.process_time()
        result = simulate(jobs, hosts=hosts, slots=slots, policy=policy)
        ours_s.append(time.process_time() - cpu)
    theirs, ours = statistics.median(theirs_s), statistics.median(ours_s)
    same = {o.job.number: o.start for o in result.outcomes} == ref.starts
    ratio = ours / max(theirs, 1e-9)
    m = result.metrics()
    return Row(
        f"simulate {label}, {policy}: xce / bench/refsim.py",
        f"cpu {ours:.2f} s / {theirs:.2f} s = {ratio:.1f}x, medians of {runs} "
        f"({m['jobs_per_s']:,.0f} jobs/s, avg wait {m['avg_wait_s']:,.0f} s, "
        f"{'same waits' if same else 'WAITS DIFFER'})",
        "<= 5x, same waits",
        verdict(ratio <= 5) if same else "ERROR",
        {"xce_s": ours, "ref_s": theirs, "ratio": ratio, "same": same, "runs": runs},
    )


if __name__ == "__main__":
    import sys

    from bench.common import table

    quick = "--quick" in sys.argv
    print(table(run(BenchPlan.make(quick, root=__import__("pathlib").Path("/tmp")))))
