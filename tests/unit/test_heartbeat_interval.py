"""The worker's heartbeat interval: its own, or the longer one the controller asks for in
its register and heartbeat answers, less a random part (xce/worker/agent/link.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_worker_messages import make_agent
from xce.client.errors import ApiError
from xce.worker.agent.link import FENCE_BEATS, HEARTBEAT_JITTER, heartbeat_interval
from xce.worker.agent.worker_agent import WorkerAgent
from xce.worker.keeper.fence import DEFAULT_FENCE_TIMEOUT_S

OWN = 5.0  # the worker config's default heartbeat_interval_s


class AskingController:
    """Answers every request like a controller, with `told` as its heartbeat interval
    (left out when None, as a controller before the field answers)."""

    def __init__(self, told: Any) -> None:
        self.told = told
        self.down = False  # answer heartbeats with a connection error (a failover)

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.down and path.endswith("/heartbeat"):
            raise ApiError(0, "connection", "connection refused")
        answer: dict[str, Any] = {"jobs": [], "version": 1, "register_again": False}
        if self.told is not None:
            answer["heartbeat_interval_s"] = self.told
        return answer


def _agent(tmp_path: Path, told: Any) -> WorkerAgent:
    return make_agent(tmp_path, AskingController(told))  # type: ignore[arg-type]


def _waits(agent: WorkerAgent) -> list[float]:
    return [heartbeat_interval(agent.state) for _ in range(500)]


def test_the_controllers_longer_interval_is_taken_from_the_registration(tmp_path: Path) -> None:
    agent = _agent(tmp_path, 7.0)
    asyncio.run(agent.link.register())
    waits = _waits(agent)
    assert min(waits) >= 7.0 * (1 - HEARTBEAT_JITTER) and max(waits) <= 7.0
    assert max(waits) - min(waits) > 0.5  # spread, not one fixed period


def test_a_heartbeat_answer_changes_the_interval(tmp_path: Path) -> None:
    client = AskingController(None)
    agent = make_agent(tmp_path, client)  # type: ignore[arg-type]
    asyncio.run(agent.link.register())
    assert max(_waits(agent)) <= OWN
    client.told = 7.0
    asyncio.run(agent.link._heartbeat([]))
    assert max(_waits(agent)) <= 7.0 and min(_waits(agent)) > OWN


def test_the_workers_own_interval_is_the_shortest_it_uses(tmp_path: Path) -> None:
    agent = _agent(tmp_path, 1.0)  # shorter than the worker's own: its own wins
    asyncio.run(agent.link.register())
    assert min(_waits(agent)) >= OWN * (1 - HEARTBEAT_JITTER)


@pytest.mark.parametrize("told", [None, -3, 0, True, "10", 1e9, float("nan")])
def test_an_absent_or_unusable_interval_leaves_the_workers_own(tmp_path: Path, told: Any) -> None:
    agent = _agent(tmp_path, told)
    asyncio.run(agent.link.register())
    assert agent.state.told_interval_s is None
    waits = _waits(agent)
    assert min(waits) >= OWN * (1 - HEARTBEAT_JITTER) and max(waits) <= OWN


def test_a_longer_interval_leaves_room_for_heartbeats_within_the_fence(tmp_path: Path) -> None:
    """A controller asking for more than the fence allows (the keepers would fence the
    jobs after a missed heartbeat or two) gets the fence's share instead."""
    agent = _agent(tmp_path, 25.0)
    asyncio.run(agent.link.register())
    ceiling = DEFAULT_FENCE_TIMEOUT_S / FENCE_BEATS
    assert ceiling < 25.0 and agent.state.told_interval_s == ceiling
    assert max(_waits(agent)) <= ceiling


def test_after_a_failed_heartbeat_the_next_comes_at_the_workers_own_interval(
    tmp_path: Path,
) -> None:
    """The longer interval is for a controller that hears us: after a heartbeat nobody
    took (a failover, a loaded controller) the worker tries again at its own."""
    client = AskingController(7.0)
    agent = make_agent(tmp_path, client)  # type: ignore[arg-type]
    asyncio.run(agent.link.register())
    client.down = True
    assert asyncio.run(agent.link._heartbeat([])) is False
    waits = [heartbeat_interval(agent.state, answered=False) for _ in range(200)]
    assert max(waits) <= OWN
    client.down = False
    assert asyncio.run(agent.link._heartbeat([])) is True
    assert min(_waits(agent)) > OWN
