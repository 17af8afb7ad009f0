"""The simulator against hand-computed results, the SWF reader, and the CLI.

The four-job trace (1 host, 4 slots; procs / run / requested):
  1: t=0,  2 slots, 100 s / 100 s      2: t=0,  4 slots, 50 s / 60 s
  3: t=10, 2 slots, 20 s / 30 s        4: t=20, 2 slots, 200 s / 200 s

fcfs (strict): 1 [0,100], 2 [100,150], 3 [150,170], 4 [150,350]
   waits 0, 100, 140, 130 -> 92.5; bsld 1, 3, 8, 1.65 -> 3.4125; makespan 350
first-fit (the live default): 1 [0,100], 3 [10,30], 4 [30,230], 2 [230,280]
   waits 0, 230, 0, 10 -> 60; bsld 1, 5.6, 1, 1.05 -> 2.1625; makespan 280
easy: 2 is reserved from 100; 3 ends by 40 <= 100 so it backfills; 4 would run past 100
   1 [0,100], 3 [10,30], 2 [100,150], 4 [150,350]
   waits 0, 100, 0, 130 -> 57.5; bsld 1, 3, 1, 1.65 -> 1.6625; makespan 350
Busy slot-seconds 2*100 + 4*50 + 2*20 + 2*200 = 840 of 4 * makespan.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import SwfError, SwfJob, parse_swf, read_swf, write_swf
from xce.sched.sim.workload import synthetic

TRACE = """\
; Version: 2.2
; MaxProcs: 4
1 0 -1 100 2 -1 -1 2 100 -1 1 1 1 -1 1 -1 -1 -1
2 0 -1 50 4 -1 -1 4 60 -1 1 2 1 -1 1 -1 -1 -1
3 10 -1 20 2 -1 -1 2 30 -1 1 1 1 -1 1 -1 -1 -1
4 20 -1 200 2 -1 -1 2 200 -1 1 3 2 -1 1 -1 -1 -1
"""


@pytest.mark.parametrize(
    ("policy", "wait", "bsld", "makespan", "starts"),
    [
        ("fcfs", 92.5, 3.4125, 350, {1: 0, 2: 100, 3: 150, 4: 150}),
        ("first-fit", 60.0, 2.1625, 280, {1: 0, 2: 230, 3: 10, 4: 30}),
        ("easy", 57.5, 1.6625, 350, {1: 0, 2: 100, 3: 10, 4: 150}),
    ],
)
def test_hand_computed(
    policy: str, wait: float, bsld: float, makespan: float, starts: dict[int, float]
) -> None:
    result = simulate(parse_swf(TRACE.splitlines()).jobs, hosts=1, slots=4, policy=policy)
    m = result.metrics()
    assert (m["jobs"], m["skipped"], m["killed"]) == (4, 0, 0)
    assert m["avg_wait_s"] == pytest.approx(wait)
    assert m["avg_bounded_slowdown"] == pytest.approx(bsld)
    assert m["makespan_s"] == makespan
    assert m["utilisation"] == pytest.approx(840 / (4 * makespan))
    assert {o.job.number: o.start for o in result.outcomes} == starts


def test_jobs_are_killed_at_their_requested_time() -> None:
    # runs 100 s but asked for 50: killed at 50; the next job starts then.
    jobs = [SwfJob(1, 0, 100, 4, 50, "u1", "g1"), SwfJob(2, 0, 10, 4, 10, "u1", "g1")]
    result = simulate(jobs, hosts=1, slots=4, policy="fcfs")
    m = result.metrics()
    assert (m["killed"], m["makespan_s"]) == (1, 60)
    assert [(o.start, o.end) for o in result.outcomes] == [(0, 50), (50, 60)]
    # bounded slowdown uses the 50 s it ran: 1, then (50 + 10) / max(10, 10) = 6
    assert m["avg_bounded_slowdown"] == pytest.approx(3.5)


def test_jobs_wider_than_the_machine_are_skipped_wider_than_a_host_spread() -> None:
    jobs = [
        SwfJob(1, 0, 10, 8, 10, "u1", "g1"),
        SwfJob(2, 0, 10, 2, 10, "u1", "g1"),
        SwfJob(3, 0, 10, 9, 10, "u1", "g1"),
    ]
    m = simulate(jobs, hosts=2, slots=4).metrics()
    assert (m["jobs"], m["skipped"]) == (2, 1)  # the 8-slot job runs on both hosts


@pytest.mark.parametrize(
    "policy",
    ["fcfs", "first-fit", "easy", "fairshare", "fairshare-group", "spread", "pack,backfill"],
)
def test_generated_workload_respects_capacity(policy: str) -> None:
    jobs = synthetic(400, max_procs=16, seed=7, mean_interarrival_s=30)
    result = simulate(jobs, hosts=4, slots=16, policy=policy)
    assert result.metrics()["jobs"] == 400
    edges: list[tuple[float, int, str]] = []
    for o in result.outcomes:
        assert o.start is not None and o.end is not None and o.start >= o.job.submit
        edges += [(o.start, o.job.procs, o.host), (o.end, -o.job.procs, o.host)]
    used: dict[str, int] = {}
    for _, delta, host in sorted(edges, key=lambda e: (e[0], e[1])):  # ends first
        used[host] = used.get(host, 0) + delta
        assert used[host] <= 16


def test_backfill_beats_strict_fcfs_on_a_busy_generated_workload() -> None:
    jobs = synthetic(400, max_procs=16, seed=3, mean_interarrival_s=20)
    fcfs = simulate(jobs, hosts=2, slots=16, policy="fcfs").metrics()
    easy = simulate(jobs, hosts=2, slots=16, policy="easy").metrics()
    assert easy["avg_wait_s"] < fcfs["avg_wait_s"]
    assert easy["avg_bounded_slowdown"] < fcfs["avg_bounded_slowdown"]


def test_swf_header_skips_and_errors(tmp_path: Path) -> None:
    trace = parse_swf((TRACE + "5 30 -1 -1 2 -1 -1 2 10 -1 0 1 1 -1 1 -1 -1 -1\n").splitlines())
    assert (len(trace.jobs), trace.skipped, trace.max_procs) == (4, 1, 4)
    assert trace.jobs[0] == SwfJob(1, 0.0, 100.0, 2, 100, "u1", "g1")
    with pytest.raises(SwfError, match="line 2: expected 18 fields, found 3"):
        parse_swf(["; x", "1 2 3"])
    path = tmp_path / "t.swf.gz"
    path.write_bytes(gzip.compress(write_swf(trace.jobs, {"MaxProcs": "4"}).encode()))
    again = read_swf(path)
    assert again.jobs == trace.jobs and again.max_procs == 4


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", "simulate", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_json_on_a_gzipped_trace(tmp_path: Path) -> None:
    path = tmp_path / "small.swf.gz"
    path.write_bytes(gzip.compress(TRACE.encode()))
    done = run_cli(str(path), "--policy", "easy", "--json")
    assert done.returncode == 0, done.stderr
    m = json.loads(done.stdout)
    assert (m["jobs"], m["avg_wait_s"], m["makespan_s"]) == (4, 57.5, 350)
    text = run_cli(str(path), "--policy", "fcfs")
    assert "avg wait     92.5 s" in text.stdout


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("1 2 3\n")
    for args, message in [
        ((str(bad),), "line 1: expected 18 fields"),
        ((str(tmp_path / "none.swf"),), "cannot read"),
        ((str(bad), "--policy", "nope"), "unknown scheduler plugin"),
    ]:
        if "nope" in args:
            bad.write_text(TRACE)
        done = run_cli(*args)
        assert done.returncode == 1
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "Traceback" not in done.stderr


def test_pwa_conventions() -> None:
    # job 1: no requested time; job 2: no requested processors (5 allocated); MaxNodes only
    text = (
        "; MaxNodes: 8\n"
        "1 0 -1 100.5 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
        "2 5 -1 50 5 -1 -1 -1 60 -1 1 2 1 -1 1 -1 -1 -1\n"
    )
    trace = parse_swf(text.splitlines())
    assert trace.max_procs == 8
    assert trace.jobs[0].requested_time == 101  # the run time, rounded up: perfect estimate
    assert trace.jobs[1].procs == 5 and trace.jobs[1].requested_time == 60
    infinite = parse_swf(text.splitlines(), no_estimate="infinite")
    assert infinite.jobs[0].requested_time is None
    with pytest.raises(SwfError, match="no_estimate must be one of runtime, infinite"):
        parse_swf(text.splitlines(), no_estimate="guess")


def test_estimates_change_easy_and_nothing_is_killed() -> None:
    # 1 holds 3 of 4 slots for 100 s; 2 (4 slots) waits; 3 (1 slot, 200 s) may backfill only
    # if EASY knows when 1 ends: with no estimate the reservation has no start, so it does.
    text = (
        "1 0 -1 100 3 -1 -1 3 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
        "2 1 -1 10 4 -1 -1 4 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
        "3 2 -1 200 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
    )
    perfect = simulate(parse_swf(text.splitlines()).jobs, 1, 4, "easy")
    assert {o.job.number: o.start for o in perfect.outcomes} == {1: 0, 2: 100, 3: 110}
    assert perfect.metrics()["killed"] == 0
    blind = simulate(parse_swf(text.splitlines(), "infinite").jobs, 1, 4, "easy")
    assert {o.job.number: o.start for o in blind.outcomes} == {1: 0, 2: 202, 3: 2}


def test_metrics_median_and_detail() -> None:
    result = simulate(parse_swf(TRACE.splitlines()).jobs, hosts=1, slots=4, policy="fcfs")
    m = result.metrics()
    assert m["median_wait_s"] == 115.0  # waits 0, 100, 130, 140
    assert result.detail() == [
        {
            "size": "2",
            "jobs": 3,
            "avg_wait_s": 90.0,
            "median_wait_s": 130.0,
            "max_wait_s": 140.0,
            "avg_bounded_slowdown": pytest.approx((1 + 8 + 1.65) / 3),
        },
        {
            "size": "3-4",
            "jobs": 1,
            "avg_wait_s": 100.0,
            "median_wait_s": 100.0,
            "max_wait_s": 100.0,
            "avg_bounded_slowdown": 3.0,
        },
    ]


def test_detail_by_run_time_shows_who_waits_by_job_length() -> None:
    result = simulate(parse_swf(TRACE.splitlines()).jobs, hosts=1, slots=4, policy="fcfs")
    rows = {row["run_time"]: row for row in result.detail_by_run_time()}
    assert list(rows) == ["< 1 min", "1-10 min"]  # jobs of 50 and 20 s; of 100 and 200 s
    assert (rows["< 1 min"]["jobs"], rows["< 1 min"]["avg_wait_s"]) == (2, 120.0)
    assert (rows["1-10 min"]["max_wait_s"], rows["1-10 min"]["median_wait_s"]) == (130.0, 65.0)


def test_cli_two_policies_detail_and_csv(tmp_path: Path) -> None:
    path = tmp_path / "small.swf"
    path.write_text(TRACE)
    out = tmp_path / "starts.csv"
    done = run_cli(str(path), "--policy", "easy", "--policy", "fcfs", "--detail", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["policy", "easy", "(backfill)", "fcfs"]
    assert "57.5 s" in lines[3] and "92.5 s" in lines[3]
    assert "easy: by job size (slots)" in done.stdout
    assert "fcfs: by job size (slots)" in done.stdout
    assert "easy: by run time" in done.stdout and "fcfs: by run time" in done.stdout
    rows = out.read_text().splitlines()
    assert rows[0] == "policy,job,user,procs,submit,start,end,wait,host,killed"
    assert "easy,3,u1,2,10,10,30,0,n1,0" in rows and "fcfs,3,u1,2,10,150,170,140,n1,0" in rows
    assert len(rows) == 9
    both = json.loads(run_cli(str(path), "-p", "easy", "-p", "fcfs", "--json").stdout)
    assert [m["avg_wait_s"] for m in both] == [57.5, 92.5]
    bad = run_cli(str(path), "--no-estimate", "guess")
    assert (
        bad.returncode == 1
        and "--no-estimate must be one of runtime, infinite" in bad.stderr
        and len(bad.stderr.strip().splitlines()) == 1
    )
    help_text = run_cli("--help").stdout
    assert "requested time -1" in help_text and "MaxNodes" in help_text


def test_progress_reports_jobs_ended() -> None:
    seen: list[int] = []
    jobs = synthetic(2500, max_procs=16, seed=2, mean_interarrival_s=200)
    simulate(jobs, hosts=1, slots=16, policy="easy", progress=seen.append)
    assert seen == [1024, 2048, 2500]


@pytest.mark.parametrize(
    "policy", ["fcfs", "first-fit", "easy", "fairshare", "pack", "backfill,pack", "spread"]
)
def test_a_replay_leaves_no_cycles_for_the_paused_collector(policy: str) -> None:
    """The replay pauses the cyclic collector (simulate._cyclic_gc_paused): sound only
    while reference counting frees what it makes. What a replay leaves to the collector
    must not grow with the trace (a cycle per pass or per job would), on one host or four."""
    import gc

    def left_over(count: int, hosts: int) -> int:
        jobs = synthetic(count, max_procs=16, seed=3, mean_interarrival_s=30)
        gc.collect()
        gc.disable()
        try:
            simulate(jobs, hosts=hosts, slots=16 // hosts, policy=policy)
            return gc.collect()
        finally:
            gc.enable()

    for hosts in (1, 4):
        assert left_over(2_000, hosts) <= left_over(200, hosts) + 10


@pytest.mark.parametrize("policy", ["fcfs", "easy", "fairshare"])
def test_a_replays_cluster_is_freed_by_reference_counting(policy: str) -> None:
    """The simulated cluster is not left to the collector when the replay ends (its
    snapshot's running views, read by EASY and fairshare, used to refer back to it)."""
    import gc

    from xce.sched.sim.cluster import SimCluster

    jobs = synthetic(300, max_procs=16, seed=3, mean_interarrival_s=30)
    gc.collect()
    gc.disable()
    try:
        simulate(jobs, hosts=4, slots=4, policy=policy)
        assert not [o for o in gc.get_objects() if type(o) is SimCluster]
    finally:
        gc.enable()


def test_a_replay_leaves_the_callers_young_objects_young() -> None:
    """The pause ends with the collector as it was, its generations untouched: a cycle the
    caller dropped before a replay is still freed by a young collection after it (a replay
    that moved every young object to the oldest generation at its end, `gc.freeze()` and
    `unfreeze()`, kept such cycles until a full collection, which its reset counts kept
    from coming: a process replaying again and again grew without bound)."""
    import gc
    import weakref

    class Cycle:
        me: object

    jobs = synthetic(60, max_procs=4, seed=2, mean_interarrival_s=20)
    for policy in ("fcfs", "fairshare"):
        gc.collect()
        cycle = Cycle()
        cycle.me = cycle
        dropped = weakref.ref(cycle)
        del cycle
        simulate(jobs, hosts=40, slots=4, policy=policy)
        gc.collect(1)  # the young generations only
        assert dropped() is None


def test_the_collector_is_paused_for_a_replay_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its state is as it was after the replay, and the young generation is still
    collected every `_COLLECT_EVERY` passes (cycles a plugin might make)."""
    import gc

    from xce.sched.sim import simulate as module

    jobs = synthetic(300, max_procs=8, seed=2, mean_interarrival_s=20)
    collected: list[int] = []
    real = gc.collect

    def counting(generation: int = 2) -> int:
        collected.append(generation)
        return real(generation)

    monkeypatch.setattr(module, "_COLLECT_EVERY", 4)
    monkeypatch.setattr(gc, "collect", counting)
    assert gc.isenabled()
    result = simulate(jobs, hosts=1, slots=8, policy="easy")
    assert gc.isenabled()
    assert collected == [0] * (result.passes // 4) and result.passes >= 8
    gc.disable()
    try:
        simulate(jobs, hosts=1, slots=8, policy="easy")
        assert not gc.isenabled()
    finally:
        gc.enable()
