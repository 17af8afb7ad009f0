"""The simulator packs jobs wider than a host on several hosts: a trace on
`--hosts N --slots 1` decides exactly as on `--hosts 1 --slots N` under EASY and FCFS, and
nothing that fits the machine is skipped."""

from __future__ import annotations

import pytest

from xce.sched.sim.simulate import simulate
from xce.sched.sim.workload import synthetic

KEYS = (
    "jobs",
    "skipped",
    "avg_wait_s",
    "median_wait_s",
    "avg_bounded_slowdown",
    "utilisation",
    "makespan_s",
)


def _starts(result) -> list[tuple[int, float | None]]:  # type: ignore[no-untyped-def]
    return sorted((o.job.number, o.start) for o in result.outcomes)


@pytest.mark.parametrize("policy", ["easy", "fcfs"])
# loaded traces where EASY must leave the hosts free now to backfill (a reservation that
# took them first would differ from one big host: these failed so)
@pytest.mark.parametrize(
    ("width", "seed", "interarrival"), [(8, 3, 15.0), (16, 4, 5.0), (16, 5, 5.0), (16, 2, 30.0)]
)
def test_n_hosts_of_one_slot_equal_one_host_of_n(
    policy: str, width: int, seed: int, interarrival: float
) -> None:
    jobs = synthetic(150, width, seed=seed, mean_interarrival_s=interarrival)
    wide = simulate(jobs, 1, width, policy)
    spread = simulate(jobs, width, 1, policy)
    assert spread.skipped == 0 and wide.skipped == 0
    assert any(o.job.procs > 1 for o in spread.outcomes)
    assert _starts(spread) == _starts(wide)
    a, b = wide.metrics(), spread.metrics()
    assert {k: a[k] for k in KEYS} == pytest.approx({k: b[k] for k in KEYS})


def test_a_job_wider_than_a_host_is_packed_on_ceil_p_over_s_hosts() -> None:
    jobs = synthetic(60, 16, seed=5)
    result = simulate(jobs, 4, 4, "easy")
    assert result.skipped == 0
    for o in result.outcomes:
        if o.start is not None:
            hosts = o.host.split("+")
            assert len(hosts) == -(-o.job.procs // 4), (o.job.procs, o.host)


def test_only_jobs_wider_than_the_machine_are_skipped() -> None:
    jobs = synthetic(40, 16, seed=7)
    result = simulate(jobs, 2, 4, "easy")  # 8 slots: the 16-slot jobs cannot ever run
    assert result.skipped == sum(1 for j in jobs if j.procs > 8) > 0
    assert all(o.start is not None for o in result.outcomes)
