"""A replay's queue length and utilisation over virtual time (`SimResult.series`), checked
by hand on the four-job trace of tests/sched/test_simulate.py, and `xce simulate --chart`
drawing it through the real command.

The schedules (1 host, 4 slots; job: slots [start, end]), from that module's doc:
  fcfs:      1: 2 [0,100]  2: 4 [100,150]  3: 2 [150,170]  4: 2 [150,350]
  easy:      1: 2 [0,100]  3: 2 [10,30]    2: 4 [100,150]  4: 2 [150,350]
  first-fit: 1: 2 [0,100]  3: 2 [10,30]    4: 2 [30,230]   2: 4 [230,280]
Jobs 1 and 2 arrive at 0, 3 at 10, 4 at 20. A sample holds the figures after everything
that happened at its instant.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sched.test_simulate import TRACE
from xce.sched.sim.result import SERIES_POINTS
from xce.sched.sim.simulate import simulate
from xce.sched.sim.swf import parse_swf
from xce.sched.sim.workload import synthetic


@pytest.mark.parametrize(
    ("policy", "step", "queued", "utilisation"),
    [
        # every 50 s from 0 to 350
        ("fcfs", 50, [1, 3, 2, 0, 0, 0, 0, 0], [0.5, 0.5, 1, 1, 0.5, 0.5, 0.5, 0]),
        ("easy", 50, [1, 2, 1, 0, 0, 0, 0, 0], [0.5, 0.5, 1, 0.5, 0.5, 0.5, 0.5, 0]),
        # every 40 s from 0 to 280: its makespan is shorter
        ("first-fit", 40, [1, 1, 1, 1, 1, 1, 0, 0], [0.5, 1, 1, 0.5, 0.5, 0.5, 1, 0]),
    ],
)
def test_the_series_samples_the_queue_and_the_busy_slots_at_a_fixed_step(
    policy: str, step: float, queued: list[int], utilisation: list[float]
) -> None:
    result = simulate(parse_swf(TRACE.splitlines()).jobs, hosts=1, slots=4, policy=policy)
    series = result.series(max_points=8)
    assert series.step_s == step
    assert series.times == [k * step for k in range(8)]
    assert series.queued == queued
    assert series.utilisation == utilisation


def test_a_short_trace_is_sampled_every_second_and_agrees_with_the_metrics() -> None:
    result = simulate(parse_swf(TRACE.splitlines()).jobs, hosts=1, slots=4, policy="fcfs")
    series = result.series()
    assert series.step_s == 1 and len(series.times) == 351  # 0 .. 350 s
    assert series.queued[99:102] == [3, 2, 2]  # 2 starts at 100 as 1 ends
    assert series.utilisation[169:172] == [1.0, 0.5, 0.5]  # 3 ends at 170
    # busy slot-seconds over the makespan, summed a second at a time
    assert sum(series.utilisation[:-1]) / 350 == pytest.approx(result.metrics()["utilisation"])


def test_a_long_trace_keeps_a_bounded_number_of_points() -> None:
    result = simulate(synthetic(3000, seed=7, max_procs=16), hosts=1, slots=16, policy="easy")
    series = result.series()
    span = result.metrics()["makespan_s"]
    assert span > 100 * SERIES_POINTS  # a trace that would give far more points at 1 s
    assert len(series.times) <= SERIES_POINTS
    assert series.times[-1] <= span < series.times[-1] + series.step_s
    assert max(series.queued) > 0 and 0 < max(series.utilisation) <= 1
    with pytest.raises(ValueError, match="at least 2"):
        result.series(max_points=1)


def _simulate_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "LINES": "30"}
    return subprocess.run(
        [sys.executable, "-m", "xce", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_simulate_chart_draws_each_policy_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "small.swf"
    path.write_text(TRACE)
    done = _simulate_cli(str(path), "-p", "easy", "-p", "fcfs", "--chart")
    assert done.returncode == 0, done.stderr
    table, _, chart = done.stdout.partition("\n\n")
    assert table.splitlines()[0].split()[:4] == ["policy", "easy", "(backfill)", "fcfs"]
    lines = chart.splitlines()
    assert "queued jobs" in lines[0] and "utilisation %" in lines[0]
    assert lines[0].index("queued jobs") < lines[0].index("utilisation %")  # side by side
    assert all(len(line) <= 100 for line in lines)  # the terminal's width
    assert 10 <= len(lines) <= 30
    legend = "\n".join(lines)
    assert legend.count("easy") == 2 and legend.count("fcfs") == 2  # one line each, each chart
    assert lines[-1].count("minutes after the first submit") == 2
    assert "\x1b[" not in done.stdout  # piped: no colour
    refused = _simulate_cli(str(path), "--chart", "--json")
    assert refused.returncode == 2 and "choose one" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
