"""A real controller and worker for the console tests (the integration fixture's processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=2, attrs='[worker.attributes]\nrack = "r1"\ngroup = "g1"')
    try:
        yield c
    finally:
        c.stop()
