from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A controller and two workers (w1: 4 slots, w2: 4 slots), real processes."""
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=4, attrs='[worker.attributes]\nrack = "r1"\ntype = "X86_64"')
    c.start_worker("w2", slots=4, attrs='[worker.attributes]\nrack = "r2"\ntype = "X86_64"')
    try:
        yield c
    finally:
        c.stop()


THREE_HOSTS = ("w1", "w2", "w3")


@pytest.fixture
def three(tmp_path: Path) -> Iterator[Cluster]:
    """A controller and three workers of 4 slots (w1, w2, w3), all registered: the cluster
    of the tests of jobs across hosts."""
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    for name in THREE_HOSTS:
        c.start_worker(name, slots=4)
    c.wait_for(lambda: len(c.get("/api/v1/hosts")["hosts"]) == 3, 60, "three workers")
    try:
        yield c
    finally:
        c.stop()
