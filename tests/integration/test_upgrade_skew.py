"""Builds of different formats meeting over replication, with real candidate processes.

A standby that cannot read what its primary writes must neither follow it (it would stop
at the first record it cannot decode and look healthy) nor take over when that primary
dies (its log lacks what the primary acknowledged). A primary refuses a standby that
cannot read its formats and lists it as incompatible. The other build is played by a
test peer speaking the real replication protocol with other version fields.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.integration.ha_cluster import STANDBY_TOKEN, HaCluster, logged
from tests.integration.test_ha_cli import xce
from xce.core.versions import WAL_FORMAT
from xce.ha import protocol


class NewerPrimary:
    """Candidate 0 played by a newer build: /healthz says primary, and its replication
    listener welcomes a standby with WAL format 99 (in a thread of its own)."""

    def __init__(self, c: HaCluster) -> None:
        self.c = c
        self.port = c.ports[0]
        self.loop = asyncio.new_event_loop()
        self.hellos: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.stopped = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),))
        self.thread.start()
        assert self.ready.wait(10)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "role": "primary",
                "epoch": 5,
                "seq": 100,
                "log_epoch": 5,
                "seen": 5,
                "rank": 0,
                "url": self.c.candidate_urls[0],
                "primary": self.c.candidate_urls[0],
                "replication": f"127.0.0.1:{self.port + 1}",
                "serving": True,
                "reason": None,
            }
        )

    async def _standby(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await protocol.read_message(reader)
        self.hellos.append(hello.body)
        await protocol.send(
            writer,
            "welcome",
            5,
            {
                "startSeq": 101,
                "snapshot": False,
                "mode": "async",
                "history": [1, 1, 5, 50],
                "files": True,
                "release": "0.3.0",
                "walFormat": 99,
                "checkpointFormat": 99,
                "protocol": 9,
            },
        )
        writer.close()

    async def _run(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        server = await asyncio.start_server(self._standby, "127.0.0.1", self.port + 1)
        self.ready.set()
        await self.stopped.wait()
        server.close()
        await runner.cleanup()

    def kill(self) -> None:
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.thread.join(10)


def test_an_older_standby_neither_follows_nor_takes_over_from_a_newer_primary(
    tmp_path: Path,
) -> None:
    c = HaCluster(tmp_path / "ha", failover_timeout=1.0)
    newer = NewerPrimary(c)
    try:
        c.start_candidate(1, "standby")

        def marked() -> bool:
            h = c.health(1)
            return bool(h and h.get("incompatible"))

        c.wait_for(marked, 20, "the standby calling the primary incompatible")
        health = c.health(1)
        assert health is not None and health["role"] == "standby"
        why = health["incompatible"]
        assert "format 99" in why and f"reads ≤ {WAL_FORMAT}" in why and "0.3.0" in why
        assert newer.hellos and newer.hellos[0]["walFormat"] == WAL_FORMAT
        assert newer.hellos[0]["release"]

        newer.kill()  # the newer primary dies: the older standby must not take its place
        time.sleep(5 * 1.0)  # five failover timeouts
        health = c.health(1)
        assert health is not None and health["role"] == "standby", health
        assert logged(c, "not taking over")

        c.kill_candidate(1)  # kill -9 and start again: still not electable
        c.start_candidate(1, "standby")
        time.sleep(3 * 1.0)
        health = c.health(1)
        assert health is not None and health["role"] == "standby"
        assert "format 99" in (health.get("incompatible") or "")
    finally:
        if newer.thread.is_alive():
            newer.kill()
        c.stop()


def test_a_primary_refuses_an_older_standby_and_shows_it(tmp_path: Path) -> None:
    """A hello from a build before versions were sent (no version fields: format 1) is
    refused with one line naming both builds, and the primary's status lists it."""
    c = HaCluster(tmp_path / "ha")
    try:
        c.start_candidate(0)
        assert c.wait_primary() == 0

        async def old_hello() -> str:
            reader, writer = await asyncio.open_connection("127.0.0.1", c.ports[0] + 1)
            await protocol.send(
                writer,
                "hello",
                0,
                {"node": "http://old-standby", "token": STANDBY_TOKEN, "lastSeq": 0},
            )
            answer = await protocol.read_message(reader)
            writer.close()
            assert answer.kind == "refuse", answer
            return str(answer.body["text"])

        text = asyncio.run(old_hello())
        assert text.startswith("incompatible: ") and "before 0.2.0" in text
        assert f"writes {WAL_FORMAT}" in text

        view = c.request("GET", "/api/v1/cluster")
        assert view["version"]
        (entry,) = [s for s in view["ha"]["standbys"] if s["node"] == "http://old-standby"]
        assert entry["in_sync"] is False and "before 0.2.0" in entry["incompatible"]

        status = xce(c, "cluster", "status")
        assert status.returncode == 0, status.stderr
        assert "INCOMPATIBLE" in status.stdout and "before 0.2.0" in status.stdout
    finally:
        c.stop()


class RefusingController:
    """An older controller, in a thread: it answers a registration that carries versions
    as a build from before versions did (`body.release is not a known field`), and one
    without them as a build that refuses the worker's versions (409 version_skew)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bodies: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stopped = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),))
        self.thread.start()
        assert self.ready.wait(10)

    async def _register(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if "release" in body:
            error = {"code": "invalid_request", "message": "body.release is not a known field"}
            return web.json_response({"error": error}, status=400)
        error = {"code": "version_skew", "message": "worker too new for this test controller"}
        return web.json_response({"error": error}, status=409)

    async def _run(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/workers/register", self._register)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self.ready.set()
        await self.stopped.wait()
        await runner.cleanup()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.thread.join(10)


def test_a_refused_worker_says_why_once_and_keeps_asking(tmp_path: Path) -> None:
    """A real `xce worker`: against a controller from before versions it registers without
    them; refused for its versions it logs one line and retries instead of exiting."""
    from tests.integration.cluster import Cluster, free_port

    c = Cluster(tmp_path / "c")
    c.root.mkdir(parents=True)
    fake = RefusingController(free_port())
    try:
        c.worker_controllers["w1"] = [f"http://127.0.0.1:{fake.port}"]
        c.worker_names.add("w1")
        c.workers["w1"] = c._spawn("w1", "worker", "-c", str(c._config("w1")))
        c.wait_for(lambda: len(fake.bodies) >= 4, 30, "four registrations")
        assert c.workers["w1"].poll() is None, c.log_text()  # still running
        first, second = fake.bodies[0], fake.bodies[1]
        assert first["protocol"] >= 2 and first["release"]
        assert "release" not in second and "protocol" not in second  # as protocol 1
        lines = [line for line in c.log_text().splitlines() if "refuses this worker" in line]
        assert len(lines) == 1 and "too new for this test controller" in lines[0]
    finally:
        fake.stop()
        c.stop()
