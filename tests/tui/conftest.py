"""A real controller and worker for the console tests, shared by the tests of one module
(each test works on the jobs it submits, found by id, name or filter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("tui") / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=2, attrs='[worker.attributes]\nrack = "r1"\ngroup = "g1"')
    try:
        yield c
    finally:
        c.stop()
