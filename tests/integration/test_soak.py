"""The soak run (bench/soak.py) behind the slow marker: 30 minutes by default there.

`XCE_SOAK_MINUTES=30 python -m pytest -m slow tests/integration/test_soak.py -s`
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bench.soak import report, run_soak


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak_with_controller_kills_loses_nothing_and_stays_bounded(tmp_path: Path) -> None:
    minutes = float(os.environ.get("XCE_SOAK_MINUTES", "30"))
    result = asyncio.run(run_soak(tmp_path, minutes))
    print(report(result))
    assert result.load.acknowledged
    assert result.restarts >= max(1, int(minutes * 60 / 90) - 1)
    assert result.lost == []
    assert result.ran_twice == []
    assert result.not_done == {}
    second, last = result.rss_quarters()
    assert last <= 1.5 * second, f"RSS grew from {second} to {last}"
