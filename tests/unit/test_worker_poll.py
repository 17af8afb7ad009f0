"""The worker's assignment long poll (xce/worker/agent/link.py): the controller may hold it
`POLL_WAIT_S`, and a poll left waiting on a connection no controller answers is found by the
heartbeats (the controller's version of the host moved and no answer came for a whole
interval) and asked again, never a poll whose answer is merely on its way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.unit.test_worker_messages import FakeClient, make_agent
from xce.worker.agent.link import POLL_WAIT_S
from xce.worker.agent.worker_agent import WorkerAgent


class ScriptedPolls(FakeClient):
    """Heartbeats answered with `version`; each poll waits until the test answers it
    (`answer(n)`) or it is cancelled (counted in `cancelled`)."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 5
        self.polls: list[asyncio.Future[Any]] = []
        self.poll_kwargs: list[dict[str, Any]] = []
        self.cancelled = 0
        self.started = asyncio.Condition()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not path.endswith("/assignments"):
            await super().request(method, path, **kwargs)
            return {"version": self.version, "fence_timeout_s": 300}
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        async with self.started:
            self.polls.append(answer)
            self.poll_kwargs.append(kwargs)
            self.started.notify_all()
        try:
            return await answer
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def wait_polls(self, count: int) -> None:
        async with self.started:
            await asyncio.wait_for(self.started.wait_for(lambda: len(self.polls) >= count), 10)

    def answer(self, n: int) -> None:
        self.polls[n].set_result({"version": self.version, "jobs": []})


Steps = Callable[[WorkerAgent, ScriptedPolls], Awaitable[None]]


def polling(tmp_path: Path, version: int, steps: Steps) -> ScriptedPolls:
    """Run `steps` beside a worker's poll loop, from its first poll on, this worker's last
    known version being `version` (the controller's is 5); the client afterwards."""
    client = ScriptedPolls()
    agent = make_agent(tmp_path, client)
    agent.state.version = version

    async def main() -> None:
        poll = asyncio.create_task(agent.link.poll_loop())
        await client.wait_polls(1)
        try:
            await steps(agent, client)
        finally:
            poll.cancel()

    asyncio.run(main())
    return client


async def nothing(agent: WorkerAgent, client: ScriptedPolls) -> None:
    pass


def test_a_poll_asks_the_controller_to_hold_it_up_to_the_wait(tmp_path: Path) -> None:
    kwargs = polling(tmp_path, 5, nothing).poll_kwargs[0]
    assert kwargs["params"]["timeout"] == str(POLL_WAIT_S) and POLL_WAIT_S <= 60
    assert kwargs["timeout"] > POLL_WAIT_S  # the client outwaits the controller's hold


def test_a_poll_no_controller_answers_is_asked_again_after_a_heartbeat_interval(
    tmp_path: Path,
) -> None:
    async def steps(agent: WorkerAgent, client: ScriptedPolls) -> None:
        assert await agent.link._heartbeat([])  # news, once: the answer may be on its way
        await asyncio.sleep(0)
        assert len(client.polls) == 1 and client.cancelled == 0
        assert await agent.link._heartbeat([])  # a whole interval later, still nothing
        await client.wait_polls(2)
        assert client.cancelled == 1  # the stuck request was given up, not left open
        client.answer(1)
        await client.wait_polls(3)
        assert agent.state.version == 5

    polling(tmp_path, 3, steps)


def test_a_poll_that_answers_between_two_heartbeats_is_left_alone(tmp_path: Path) -> None:
    async def steps(agent: WorkerAgent, client: ScriptedPolls) -> None:
        assert await agent.link._heartbeat([])  # news: version 5
        client.answer(0)  # the poll brings it
        await client.wait_polls(2)
        assert agent.state.version == 5
        client.version = 6  # more news, seen by the next heartbeat first
        assert await agent.link._heartbeat([])
        await asyncio.sleep(0)
        assert len(client.polls) == 2 and client.cancelled == 0
        client.answer(1)
        await client.wait_polls(3)
        assert agent.state.version == 6 and client.cancelled == 0

    polling(tmp_path, 3, steps)


def test_heartbeats_that_agree_with_the_poll_never_restart_it(tmp_path: Path) -> None:
    async def steps(agent: WorkerAgent, client: ScriptedPolls) -> None:
        for _ in range(5):
            assert await agent.link._heartbeat([])
        await asyncio.sleep(0)
        assert len(client.polls) == 1 and client.cancelled == 0

    polling(tmp_path, 5, steps)
