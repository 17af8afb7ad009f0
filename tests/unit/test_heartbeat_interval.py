"""The worker's heartbeat interval: its own, or the longer one the controller asks for in
its register and heartbeat answers, less a random part (xce/worker/agent/link.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_worker_messages import make_agent
from xce.worker.agent.link import HEARTBEAT_JITTER, heartbeat_interval
from xce.worker.agent.worker_agent import WorkerAgent

OWN = 5.0  # the worker config's default heartbeat_interval_s


class AskingController:
    """Answers every request like a controller, with `told` as its heartbeat interval
    (left out when None, as a controller before the field answers)."""

    def __init__(self, told: Any) -> None:
        self.told = told

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        answer: dict[str, Any] = {"jobs": [], "version": 1, "register_again": False}
        if self.told is not None:
            answer["heartbeat_interval_s"] = self.told
        return answer


def _agent(tmp_path: Path, told: Any) -> WorkerAgent:
    return make_agent(tmp_path, AskingController(told))  # type: ignore[arg-type]


def _waits(agent: WorkerAgent) -> list[float]:
    return [heartbeat_interval(agent.state) for _ in range(500)]


def test_the_controllers_longer_interval_is_taken_from_the_registration(tmp_path: Path) -> None:
    agent = _agent(tmp_path, 12.0)
    asyncio.run(agent.link.register())
    waits = _waits(agent)
    assert min(waits) >= 12.0 * (1 - HEARTBEAT_JITTER) and max(waits) <= 12.0
    assert max(waits) - min(waits) > 0.5  # spread, not one fixed period


def test_a_heartbeat_answer_changes_the_interval(tmp_path: Path) -> None:
    client = AskingController(None)
    agent = make_agent(tmp_path, client)  # type: ignore[arg-type]
    asyncio.run(agent.link.register())
    assert max(_waits(agent)) <= OWN
    client.told = 9.0
    asyncio.run(agent.link._heartbeat([]))
    assert max(_waits(agent)) <= 9.0 and min(_waits(agent)) > OWN


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
