"""The scheduler counts devices per host and licenses cluster-wide, and grants device ids."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.state import ClusterState
from xce.sched.incremental import SnapshotCache
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import snapshot_of

ONE_GPU = (("gpu", "1"),)


def gpu_host(state: ClusterState, name: str, ids: str = "0,1", slots: int = 8) -> None:
    state.apply(ev.HostRegistered(T0, name, slots, 8192, (("gpu_model", "H200"),), (("gpu", ids),)))


def start(state: ClusterState, result) -> None:
    for p in result.placements:
        state.apply(ev.JobStarted(T0, p.job_id, p.host, p.devices))


def test_concurrent_one_gpu_jobs_get_distinct_devices_and_a_third_waits() -> None:
    state = new_state()
    gpu_host(state, "g1")
    ids = [submit(state, gres=ONE_GPU) for _ in range(3)]
    plain = submit(state)  # a job without devices still starts beside them
    result = plan(snapshot_of(state), T0)
    got = {p.job_id: p.devices for p in result.placements}
    assert got == {ids[0]: ("gpu:0",), ids[1]: ("gpu:1",), plain: ()}
    assert "gpu" in result.texts()[ids[2]]
    start(state, result)
    # the next pass, live snapshot cache as the controller uses it: still no device
    again = plan(SnapshotCache().snapshot(state), T0)
    assert not again.placements and "gpu" in again.texts()[ids[2]]
    state.apply(ev.JobFinished(T0 + 1, ids[0], 0, 0))
    third = plan(snapshot_of(state), T0 + 2)
    assert [(p.job_id, p.devices) for p in third.placements] == [(ids[2], ("gpu:0",))]


def test_multi_gpu_job_takes_a_host_with_enough_free_devices() -> None:
    state = new_state()
    gpu_host(state, "a", "0")
    gpu_host(state, "b", "0,1,2,3")
    two = submit(state, gres=(("gpu", "2"),))
    five = submit(state, gres=(("gpu", "5"),))
    result = plan(snapshot_of(state), T0)
    assert [(p.job_id, p.host, p.devices) for p in result.placements] == [
        (two, "b", ("gpu:0", "gpu:1"))
    ]
    assert result.texts()[five] == "no host has 5 gpu devices (the most is 4)"


def test_select_on_gpu_model_and_hosts_without_devices() -> None:
    state = new_state(hosts={"cpu1": (8, 8192)})
    gpu_host(state, "g1", "0")
    job = submit(state, gres=ONE_GPU, resources='select[gpu_model=="H200"]')
    result = plan(snapshot_of(state), T0)
    assert [(p.job_id, p.host) for p in result.placements] == [(job, "g1")]


def test_licenses_are_counted_cluster_wide() -> None:
    state = new_state(hosts={"h1": (4, 1000), "h2": (4, 1000)})
    matlab = (("matlab", "2"),)
    jobs = [submit(state, slots=2, licenses=matlab) for _ in range(3)]
    result = plan(snapshot_of(state, licenses={"matlab": 5}), T0)
    assert [p.job_id for p in result.placements] == jobs[:2]
    assert result.texts()[jobs[2]] == "waiting for license matlab (2 asked, 1 free)"
    start(state, result)
    assert state.licenses_in_use() == {"matlab": 4}
    snap = snapshot_of(state, licenses={"matlab": 5})
    assert snap.licenses == {"matlab": 1}


def test_simulator_counts_gpus_per_host(tmp_path) -> None:
    import json
    import subprocess
    import sys

    from xce.sched.sim.simulate import simulate
    from xce.sched.sim.swf import SwfJob, parse_swf, write_swf

    jobs = [SwfJob(n, 0.0, 100.0, 1, 100, "u1", "g1", gpus=1) for n in range(1, 5)]
    jobs.append(SwfJob(5, 0.0, 100.0, 1, 100, "u1", "g1", gpus=3))  # more than a host has
    result = simulate(jobs, 1, 8, "fcfs", gpus_per_host=2)
    starts = sorted(o.start for o in result.outcomes)
    assert starts == [0.0, 0.0, 100.0, 100.0] and result.skipped == 1
    trace = tmp_path / "t.swf"
    trace.write_text(write_swf(jobs[:4]))
    assert [j.gpus for j in parse_swf(trace.read_text().splitlines()).jobs] == [1] * 4
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce",
            "simulate",
            str(trace),
            "--hosts",
            "1",
            "--slots",
            "8",
            "--gpus-per-host",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out)["makespan_s"] == 200
    # without GPUs in the trace, --gpus-per-job gives every job its GPUs
    trace.write_text(write_swf([SwfJob(n, 0.0, 100.0, 1, 100, "u1", "g1") for n in range(1, 4)]))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce",
            "simulate",
            str(trace),
            "--hosts",
            "1",
            "--slots",
            "8",
            "--gpus-per-host",
            "1",
            "--gpus-per-job",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out)["makespan_s"] == 300


def test_a_backfill_reservation_for_a_gpu_job_is_on_a_host_with_gpus() -> None:
    from xce.core.model import QueueRecord

    state = new_state(
        queues=(QueueRecord("normal", plugins=("backfill",)),), hosts={"a-cpu": (8, 8192)}
    )
    gpu_host(state, "g1", "0")
    running = submit(state, gres=ONE_GPU, walltime_s=100)
    state.apply(ev.JobStarted(T0, running, "g1", ("gpu:0",)))
    waiting = submit(state, gres=ONE_GPU, walltime_s=50)
    result = plan(snapshot_of(state), T0)
    assert not result.placements
    assert [r["host"] for r in result.reservations] == ["g1"]
    assert "gpu" in result.texts()[waiting]
