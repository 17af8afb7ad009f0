"""The incremental snapshot (xce/sched/incremental.py) shows the pass what `snapshot_of` shows.

A real `ClusterState` is driven by random events of the kinds the controller commits
(submits to two queues of different priorities, starts, finishes, suspends, kills, requeues
of killed jobs that come back to their old place in the queue, purges, new hosts, a queue's
new priority, job modifications, preemptions); after every event the cache's snapshot and a
fresh `snapshot_of` must give the same running jobs and hosts, the same pending jobs in the
same order, and the same plan, with and without reasons.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from xce.core import events as ev
from xce.core.model import JobRecord, JobSpec, JobState, QueueRecord
from xce.core.state import ClusterState
from xce.sched.incremental import SnapshotCache
from xce.sched.passes.hostpool import BORROW_ABOVE
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import FreeTable, snapshot_of


def pending_order(snapshot) -> list[str]:  # type: ignore[no-untyped-def]
    key = {q: (-r.priority, q) for q, r in snapshot.queues.items()}
    return [
        j.job_id
        for j in sorted(snapshot.pending_jobs(), key=lambda j: (key[j.spec.queue], j.number))
    ]


@pytest.mark.parametrize(
    ("seed", "hosts"), [(1, 3), (2, 3), (3, 3), (4, BORROW_ABOVE + 44)], ids=str
)
def test_cache_matches_a_fresh_snapshot_after_every_event(seed: int, hosts: int) -> None:
    """With more than BORROW_ABOVE hosts a pass borrows the cache's free table (and gives
    it back): the table must describe the hosts after every event and every pass."""
    rng = random.Random(seed)
    state, cache = ClusterState(), SnapshotCache()
    now = 0.0

    def apply(event: ev.Event) -> None:
        state.apply(event)
        cache.observe(event, state)

    apply(ev.QueueCreated(now, QueueRecord("normal", plugins=("backfill",))))
    apply(ev.QueueCreated(now, QueueRecord("high", priority=10, plugins=("strict",))))
    for i in range(hosts):
        apply(ev.HostRegistered(now, f"h{i:03d}", 8, 64_000))
    rebuilds_before = None
    for step in range(600):
        now += 1.0
        pending = list(state.pending)
        running = [j for j, r in state.jobs.items() if r.state is JobState.RUN]
        choice = rng.random()
        if choice < 0.4 or not (pending or running):
            spec = JobSpec(
                user=f"u{rng.randrange(3)}",
                queue=rng.choice(("normal", "high")),
                command="x",
                slots=rng.choice((1, 2, 4, 8)),
                walltime_s=rng.choice((None, 60, 600)),
            )
            apply(ev.JobSubmitted(now, state.next_number, spec))
        elif choice < 0.65 and pending:
            job = state.jobs[rng.choice(pending)]
            for host in sorted(state.hosts):
                load = state.host_load.get(host)
                if (load.slots if load else 0) + job.spec.slots <= state.hosts[host].slots:
                    apply(ev.JobStarted(now, job.id, host))
                    break
        elif choice < 0.8 and running:
            job = state.jobs[rng.choice(running)]
            apply(ev.JobFinished(now, job.id, job.attempt, 0))
        elif choice < 0.85 and running:
            apply(ev.JobSuspended(now, rng.choice(running)))
        elif choice < 0.9 and running:  # requeue: the job returns to its place in line
            job = state.jobs[rng.choice(running)]
            apply(ev.JobKillRequested(now, job.id))
            apply(ev.JobFinished(now, job.id, job.attempt, None, 9))
            apply(ev.JobRequeued(now, job.id))
        elif choice < 0.94 and pending:
            apply(ev.JobKilled(now, rng.choice(pending)))
        elif choice < 0.96:
            done = [j for j, r in state.jobs.items() if r.state in (JobState.DONE, JobState.EXIT)]
            if done:
                apply(ev.JobsPurged(now, tuple(done[:5])))  # names no single job: rebuild
        elif choice < 0.965:  # h10 sorts between h1 and h2: views are inserted mid-list
            apply(ev.HostRegistered(now, f"h{len(state.hosts)}", 4, 16_000))
        elif choice < 0.968:  # a host registers again with another size
            host = rng.choice(sorted(state.hosts))
            apply(ev.HostRegistered(now, host, rng.choice((8, 16)), 64_000))
        elif choice < 0.972:  # a host's reachability or admin state changes
            host = state.hosts[rng.choice(sorted(state.hosts))]
            if not host.reachable:
                apply(ev.HostAvailable(now, host.name))
            elif rng.random() < 0.5:
                apply(ev.HostUnavailable(now, host.name))
            else:
                apply(rng.choice((ev.HostClosed, ev.HostOpened))(now, host.name))
        elif choice < 0.97:  # a queue changes priority: the order of the pass changes
            queue = state.queues["normal"]
            apply(ev.QueueModified(now, replace(queue, priority=rng.choice((0, 20)))))
        elif choice < 0.975 and pending:  # xce job modify: priority and queue
            job = state.jobs[rng.choice(pending)]
            apply(
                ev.JobModified(
                    now,
                    job.id,
                    replace(
                        job.spec, priority=rng.randrange(100), queue=rng.choice(("normal", "high"))
                    ),
                )
            )
        elif choice < 0.98 and pending and running:  # a preemption: slots free, memory held
            apply(ev.JobPreempted(now, rng.choice(running), rng.choice(pending)))
        else:

            def fits(r: JobRecord) -> bool:
                load = state.host_load.get(r.host or "")
                return (
                    not r.preempted_by
                    or (load.slots if load else 0) + r.spec.slots <= state.hosts[r.host or ""].slots
                )

            suspended = [
                j
                for j, r in state.jobs.items()
                if (r.state is JobState.SSUSP or r.state is JobState.USUSP) and fits(r)
            ]
            if suspended:
                apply(ev.JobResumed(now, rng.choice(suspended)))
        fresh = snapshot_of(state)
        kept = cache.snapshot(state)
        if step == 300:
            rebuilds_before = cache.rebuilds
        assert kept.jobs == () and kept.queued is not None
        assert pending_order(kept) == pending_order(fresh)
        assert kept.running == fresh.running
        assert kept.hosts == fresh.hosts
        assert kept.queues == fresh.queues
        assert kept.free is not None and kept.free.hosts is kept.hosts
        assert kept.free == FreeTable.of(kept.hosts)
        for explain in (True, False):
            assert plan(kept, now, explain) == plan(fresh, now, explain)
        assert kept.free == FreeTable.of(kept.hosts)  # given back as it was lent
    assert state.pending and cache.rebuilds < 40  # incremental, not rebuilt each time
    assert rebuilds_before is not None


def test_an_event_it_was_not_fed_makes_it_walk_again() -> None:
    state, cache = ClusterState(), SnapshotCache()
    state.apply(ev.QueueCreated(0, QueueRecord("normal")))
    state.apply(ev.HostRegistered(0, "h0", 4, 1000))
    spec = JobSpec(user="u", queue="normal", command="x")
    state.apply(ev.JobSubmitted(0, 1, spec))
    assert [j.job_id for j in cache.snapshot(state).pending_jobs()] == ["1"]
    state.apply(ev.JobSubmitted(1, 2, spec))  # not observed (as a follower applies)
    event = ev.JobStarted(2, "1", "h0")
    state.apply(event)
    cache.observe(event, state)
    kept = cache.snapshot(state)
    assert [j.job_id for j in kept.pending_jobs()] == ["2"]
    assert kept.running == snapshot_of(state).running and cache.rebuilds == 2
    other = ClusterState()  # another state object: never the old one's views
    other.apply(ev.QueueCreated(0, QueueRecord("normal")))
    assert list(cache.snapshot(other).pending_jobs()) == []


def test_jobs_submitted_alike_share_one_spec_without_what_they_run() -> None:
    """Each job submitted has its own spec; the views hand the pass one object for the jobs
    alike in what a pass reads (so a spec found blocked or predicted is found for all of
    them), without the fields no pass reads; a job modified gets its new spec's."""
    state, cache = ClusterState(), SnapshotCache()

    def apply(event: ev.Event) -> None:
        state.apply(event)
        cache.observe(event, state)

    apply(ev.QueueCreated(0, QueueRecord("normal")))
    cache.snapshot(state)
    base = JobSpec(user="u", queue="normal", command="x", walltime_s=600, slots=2)
    for n in range(1, 6):
        own = replace(base, command=f"./run {n}", env=(("N", str(n)),), cwd=f"/d{n}")
        apply(ev.JobSubmitted(float(n), n, own))
    apply(ev.JobSubmitted(6.0, 6, replace(base, walltime_s=60, command="./other")))
    views = {v.job_id: v for v in cache.snapshot(state).pending_jobs()}
    shared = views["1"].spec
    assert all(views[str(n)].spec is shared for n in range(1, 6))
    assert views["6"].spec is not shared and views["6"].spec.walltime_s == 60
    assert shared == replace(base, command=None) and shared.env == () and shared.cwd is None
    assert state.jobs["3"].spec.command == "./run 3"  # the record keeps what the job runs
    apply(ev.JobModified(7.0, "2", replace(state.jobs["2"].spec, walltime_s=60)))
    views = {v.job_id: v for v in cache.snapshot(state).pending_jobs()}
    assert views["2"].spec is views["6"].spec and views["1"].spec is views["3"].spec
    fresh = snapshot_of(state)
    assert plan(cache.snapshot(state), 8.0) == plan(fresh, 8.0)
