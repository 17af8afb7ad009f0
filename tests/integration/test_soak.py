"""The HA soak run (bench/soak.py) behind the slow marker: a short run by default.

Two controller candidates (sync replication) under load, with failovers (kill -9 of the
primary), quick restarts of a killed primary (racing the standby's takeover), kill -9 +
restart of the standby and of both injected in turn; never two primaries of one epoch.
`XCE_SOAK_MINUTES=30 python -m pytest -m slow tests/integration/test_soak.py -s` for the long
run (faults every 40-90 s instead of 15-30 s); XCE_SOAK_REPLICATION=async for async mode.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bench.soak import report, run_soak


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak_with_failovers_and_kills_loses_nothing_and_stays_bounded(tmp_path: Path) -> None:
    minutes = float(os.environ.get("XCE_SOAK_MINUTES", "4"))
    replication = os.environ.get("XCE_SOAK_REPLICATION", "sync")
    every = (40.0, 90.0) if minutes >= 15 else (15.0, 30.0)
    result = asyncio.run(run_soak(tmp_path, minutes, fault_every=every, replication=replication))
    print(report(result))
    # The short run still goes through the whole cycle: failover, restart, standby,
    # failover, standby, both.
    assert result.count("failover") >= 2
    assert result.count("restart") >= 1
    assert result.count("standby") >= 2
    assert result.count("both") >= 1
    assert len(result.faults) >= int(minutes * 60 / (every[1] + 30))
    assert result.load.acknowledged
    assert result.lost == []
    assert result.ran_twice == []
    assert result.not_done == {}
    assert result.doubles() == {} and result.health_polls > 0
    assert result.seqs[0] == result.seqs[1]
    assert result.compared > 0 and result.state_diff == []
    assert result.failures() == []
