"""The charts in a real terminal: `xce tui` in tmux (80x24) against a controller sampling
every second, after jobs ran: the cluster screen draws the charts, the hosts and queues
screens their bars, and `d` switches to the last 24 h."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.tui.test_tmux_e2e import Tmux, console  # noqa: F401  (the fixture)

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (CI installs it: .ci/run)"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "history_step_s = 1"
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def ran(cluster: Cluster) -> Cluster:
    """Jobs ran before the console starts: the history has a shape to draw."""
    for job in [cluster.submit(command="sleep 1") for _ in range(3)]:
        cluster.wait_state(job, "DONE")
    cluster.submit(command="sleep 60", name="still-running")
    return cluster


def test_the_console_draws_the_cluster_in_a_terminal(ran: Cluster, console: Tmux) -> None:
    console.wait(lambda s: "JOBID" in s, "the jobs screen")
    console.keys("4")
    screen = console.wait(lambda s: "slots in use" in s, "the charts")
    assert "Cluster, last hour" in screen and "submitted per 1 s" in screen
    assert any(ch in screen for ch in "▁▂▃▄▅▆▇█"), screen
    console.keys("d")
    console.wait(lambda s: "Cluster, last 24 h" in s, "the day's charts")
    console.keys("3")
    screen = console.wait(lambda s: "slots mem" in s and "w1" in s, "the hosts' bars")
    console.keys("2")
    console.wait(lambda s: "run   pend" in s, "the queues' bars")
    console.keys("q")
