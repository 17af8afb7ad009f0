"""The client's submit sends one Idempotency-Key per call and the same key again when it
retries on another controller candidate (the first one failed before answering)."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from xce.client import XceClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_one_key_per_submit_reused_on_the_failover_retry() -> None:
    seen: list[tuple[str, str]] = []

    def server(name: str, answer_after: bool) -> web.Application:
        async def jobs(request: web.Request) -> web.Response:
            seen.append((name, request.headers.get("Idempotency-Key", "")))
            if not answer_after:  # it took the request and died before answering
                assert request.transport is not None
                request.transport.close()
                await asyncio.sleep(1)
            return web.json_response({"job_id": "7", "queue": "normal"}, status=201)

        app = web.Application()
        app.router.add_post("/api/v1/jobs", jobs)
        return app

    runners, urls = [], []
    for name, ok in (("dying", False), ("next", True)):
        runner = web.AppRunner(server(name, ok))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        async with XceClient(urls, timeout=5) as client:
            assert (await client.submit({"command": "true"}))["job_id"] == "7"
            await client.submit({"command": "true"})
    finally:
        for runner in runners:
            await runner.cleanup()
    (a, key1), (b, key2), (c, key3) = seen
    assert (a, b, c) == ("dying", "next", "next")
    assert key1 and key1 == key2  # the retry of one call carries its key
    assert key3 and key3 != key1  # another call, another key
