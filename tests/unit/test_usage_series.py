"""Running jobs' CPU and memory series: fed by applied events, bounded per job (thinned
evenly, the first and newest points kept) and in the number of jobs (ended series make room
first), the final figures kept when an attempt ends, a requeue starting afresh."""

from __future__ import annotations

from xce.controller.usage_series import POINTS, UsageSeries
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.core.state import ClusterState

SPEC = JobSpec("alice", "normal", command="x", slots=1, memory_mb=10)


def _cluster() -> tuple[ClusterState, UsageSeries]:
    state = ClusterState()
    series = UsageSeries(state, max_jobs=2)
    for event in (
        ev.QueueCreated(0.0, QueueRecord("normal")),
        ev.HostRegistered(0.0, "w1", 8, 1000),
    ):
        state.apply(event)
    return state, series


def _apply(state: ClusterState, series: UsageSeries, *events: ev.Event) -> None:
    for event in events:
        state.apply(event)
        series.observe(event)


def _usage(cpu: float, rss: int) -> Usage:
    return Usage(cpu_user_s=cpu, cpu_system_s=0.0, max_rss_bytes=rss, wall_time_s=0.0)


def test_a_long_job_keeps_its_whole_life_in_a_bounded_series() -> None:
    state, series = _cluster()
    _apply(state, series, ev.JobSubmitted(1.0, 1, SPEC), ev.JobStarted(10.0, "1", "w1"))
    for n in range(1, 10 * POINTS):
        _apply(state, series, ev.JobUsageReported(10.0 + 30 * n, "1", 0, _usage(n, 1000 * n)))
    view = series.view("1", 0)
    points = view["points"]
    assert view["kept"] and 2 <= len(points) <= POINTS
    assert points[0] == {"t": 10.0, "cpu_s": 0.0, "rss_bytes": 0.0}
    newest = 10 * POINTS - 1
    assert points[-1]["cpu_s"] == newest and points[-1]["t"] == 10.0 + 30 * newest
    assert [p["t"] for p in points] == sorted(p["t"] for p in points)


def test_the_end_keeps_the_final_figures_and_a_requeue_starts_afresh() -> None:
    state, series = _cluster()
    _apply(state, series, ev.JobSubmitted(1.0, 1, SPEC), ev.JobStarted(2.0, "1", "w1"))
    _apply(state, series, ev.JobUsageReported(3.0, "1", 0, _usage(1.0, 10)))
    _apply(state, series, ev.JobRequeued(4.0, "1", "by admin"))
    assert series.view("1", 0)["points"] == [] and not series.view("1", 0)["kept"]
    _apply(state, series, ev.JobStarted(5.0, "1", "w1"))
    _apply(state, series, ev.JobFinished(9.0, "1", 1, 0, None, _usage(4.0, 99)))
    points = series.view("1", 1)["points"]
    assert [(p["t"], p["cpu_s"], p["rss_bytes"]) for p in points] == [
        (5.0, 0.0, 0.0),
        (9.0, 4.0, 99.0),
    ]
    _apply(state, series, ev.JobsPurged(9.5, ("1",)))
    assert not series.view("1", 1)["kept"]


def test_ended_series_make_room_and_past_the_bound_new_jobs_get_none() -> None:
    state, series = _cluster()
    for n in (1, 2, 3):
        _apply(state, series, ev.JobSubmitted(1.0, n, SPEC), ev.JobStarted(2.0, str(n), "w1"))
    assert series.view("3", 0)["kept"] is False and series.refused == 1
    _apply(state, series, ev.JobFinished(3.0, "1", 0, 0, None, _usage(1.0, 1)))
    assert series.view("1", 0)["kept"]  # an ended series stays until room is needed
    _apply(state, series, ev.JobSubmitted(4.0, 4, SPEC), ev.JobStarted(5.0, "4", "w1"))
    assert series.view("4", 0)["kept"] and not series.view("1", 0)["kept"]
    assert len(series.series) == 2
