"""Many simulated workers and submitting clients against one real controller (bench/load.py).

The bounds: every acknowledged submission ends DONE exactly once and nothing else appears;
no host is marked unavailable while its heartbeats flow (its log says so, not only the
end state); heartbeat and submit p99 latency
stay under 2.5 s — half the 5 s heartbeat interval, a sixth of the 15 s liveness window.
The default run is small (200 workers, 16 clients, 10 s); the issue's full size runs with
`python -m pytest -m slow tests/integration/test_load.py` (1,000 workers, 64 clients, 60 s).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.controller import TOKEN, Controller
from bench.load import percentile, report, run_load

P99_BOUND_S = 2.5


def _check(tmp_path: Path, workers: int, clients: int, seconds: float, relay: int = 0) -> None:
    with Controller(tmp_path / "c", extra="wal_segment_mb = 1") as ctl:  # small test WAL
        assert ctl.proc is not None
        result = asyncio.run(
            run_load(
                ctl.url,
                TOKEN,
                workers,
                clients,
                seconds,
                procs=2,
                pid=ctl.proc.pid,
                log=ctl.log,
                relay=relay,
            )
        )
    print(report(result))
    assert result.acknowledged, "no submission was acknowledged"
    assert result.missing == []
    assert result.unexpected == []
    assert result.not_done == {}
    assert result.falsely_unavailable == []
    assert result.ever_unavailable == []
    assert result.passes > 0
    assert result.errors == {}
    assert result.started == result.finished == len(result.acknowledged)
    assert percentile(result.heartbeat_latency, 0.99) < P99_BOUND_S
    assert percentile(result.submit_latency, 0.99) < P99_BOUND_S


def test_two_hundred_workers_and_sixteen_clients(tmp_path: Path) -> None:
    _check(tmp_path, workers=200, clients=16, seconds=10)


def test_two_hundred_workers_whose_heartbeats_go_through_relays(tmp_path: Path) -> None:
    """Four relays of 50 hosts (the controller's batch route, the product's batcher)."""
    _check(tmp_path, workers=200, clients=16, seconds=10, relay=50)


@pytest.mark.slow
def test_a_thousand_workers_and_sixty_four_clients(tmp_path: Path) -> None:
    _check(tmp_path, workers=1000, clients=64, seconds=60)
