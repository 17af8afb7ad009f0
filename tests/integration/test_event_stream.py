"""The live event stream against a real controller and worker process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tests.integration.cluster import ADMIN_TOKEN, Cluster
from xce.client import ApiError, XceClient
from xce.client.sse import StreamEvent


async def _collect(
    stream: AsyncIterator[StreamEvent], until: Any, timeout: float = 20
) -> list[StreamEvent]:
    seen: list[StreamEvent] = []

    async def run() -> None:
        async for event in stream:
            seen.append(event)
            if until(event):
                return

    await asyncio.wait_for(run(), timeout)
    return seen


async def test_stream_follows_a_job_and_resumes_after_reconnect(cluster: Cluster) -> None:
    async with XceClient([cluster.url], ADMIN_TOKEN) as client:
        stream = client.events(keepalive=1)
        hello = await anext(stream)
        assert hello.kind == "hello" and hello.data["resumed"] is False
        job_id = (await client.submit({"command": "sleep 1", "user": "root"}))["job_id"]
        seen = await _collect(stream, lambda e: e.kind == "job" and e.data["state"] == "DONE")
        states = [e.data["state"] for e in seen if e.kind == "job" and e.data["id"] == job_id]
        # Each message is the job's view when it was sent (changes in one burst coalesce),
        # so PEND may be skipped on a busy machine; RUN lasts a second and is seen.
        assert "RUN" in states and states[-1] == "DONE"
        assert states == sorted(states, key=["PEND", "RUN", "DONE"].index)
        hosts = [e.data for e in seen if e.kind == "host"]
        assert hosts and hosts[0]["name"] in ("w1", "w2")
        last_id = seen[-1].id
        await stream.aclose()

        # Changes made while disconnected arrive after reconnecting with the last id.
        missed = (await client.submit({"command": "true", "user": "root", "hold": True}))["job_id"]
        resumed = client.events(last_id=last_id, keepalive=1)
        hello = await anext(resumed)
        assert hello.data["resumed"] is True
        got = await _collect(resumed, lambda e: e.kind == "job" and e.data["id"] == missed)
        assert got[-1].data["state"] == "PSUSP"
        await resumed.aclose()

        # An id from another stream (another controller, a restart) means: re-fetch.
        other = client.events(last_id="deadbeef-3", keepalive=1)
        assert (await anext(other)).data["resumed"] is False
        await other.aclose()


async def test_stream_reports_loss_when_the_controller_stops(cluster: Cluster) -> None:
    async with XceClient([cluster.url], ADMIN_TOKEN, timeout=2) as client:
        stream = client.events(keepalive=1)
        await anext(stream)
        assert cluster.controller is not None
        cluster.controller.terminate()
        try:
            await asyncio.wait_for(_collect(stream, lambda e: False), 15)
        except ApiError as exc:
            assert exc.code == "stream_lost"
        else:
            raise AssertionError("the stream did not report the lost controller")
