"""Load: many simulated workers and submitting clients against one real controller.

`python -m bench.load [--workers 1000] [--clients 64] [--seconds 60]` prints a table; the
same `run_load` backs `tests/integration/test_load.py` (a smaller run by default, the full
one behind `-m slow`).

Each simulated worker speaks the real worker protocol over HTTP, all of them on one asyncio
loop in this process: register, heartbeat every `heartbeat_s`, long-poll its assignments,
"run" each assigned attempt for `job_s` seconds (no process: the point is the controller's
load, not the job's), then report it finished. The clients submit small jobs as fast as
they are acknowledged. At the end the harness waits for every acknowledged job to be DONE
and checks the controller's state against what it was told, exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class LoadResult:
    workers: int
    clients: int
    seconds: float
    acknowledged: list[str] = field(default_factory=list)
    submit_latency: list[float] = field(default_factory=list)
    heartbeat_latency: list[float] = field(default_factory=list)
    heartbeats: int = 0
    started: int = 0
    finished: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    falsely_unavailable: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    not_done: dict[str, str] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    drain_seconds: float = 0.0
    # job id -> attempts a simulated worker started (more than one: the job ran twice)
    starts: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class SimWorker:
    """One fake host: the real protocol, fake jobs."""

    def __init__(
        self,
        name: str,
        session: aiohttp.ClientSession,
        url: str,
        token: str,
        result: LoadResult,
        heartbeat_s: float,
        job_s: float,
    ) -> None:
        self.name = name
        self.session = session
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.result = result
        self.heartbeat_s = heartbeat_s
        self.job_s = job_s
        self.version = -1
        self.running: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.done: set[tuple[str, int]] = set()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(self.url + path, json=body, headers=self.headers) as r:
            if r.status >= 400:
                self.result.error(f"{path.split('/')[-1]} {r.status}")
                return None
            return await r.json()

    async def register(self) -> None:
        answer = await self._post(
            "/api/v1/workers/register", {"host": self.name, "slots": 2, "memory_mb": 4096}
        )
        if answer is not None:
            self._apply(answer)

    async def heartbeats(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(random.random() * self.heartbeat_s)  # spread them out
        while not stop.is_set():
            started = time.perf_counter()
            try:
                running = [{"job_id": j, "attempt": a} for (j, a) in self.running]
                if (
                    await self._post(f"/api/v1/workers/{self.name}/heartbeat", {"running": running})
                    is not None
                ):
                    self.result.heartbeats += 1
                    self.result.heartbeat_latency.append(time.perf_counter() - started)
            except aiohttp.ClientError:
                self.result.error("heartbeat connection")
            await asyncio.sleep(self.heartbeat_s)

    async def poll(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                path = f"/api/v1/workers/{self.name}/assignments?version={self.version}&timeout=5"
                async with self.session.get(self.url + path, headers=self.headers) as r:
                    if r.status != 200:
                        self.result.error(f"assignments {r.status}")
                        await asyncio.sleep(0.5)
                        continue
                    self._apply(await r.json())
            except aiohttp.ClientError:
                self.result.error("assignments connection")
                await asyncio.sleep(0.5)

    def _apply(self, answer: dict[str, Any]) -> None:
        self.version = answer["version"]
        for item in answer["jobs"]:
            key = (item["job_id"], item["attempt"])
            if item["action"] == "run" and key not in self.running and key not in self.done:
                self.result.started += 1
                self.result.starts[key[0]] = self.result.starts.get(key[0], 0) + 1
                self.running[key] = asyncio.create_task(self._run(key))

    async def _run(self, key: tuple[str, int]) -> None:
        await asyncio.sleep(self.job_s)
        body = {"attempt": key[1], "exit_code": 0, "wall_time_s": self.job_s}
        for _ in range(20):  # a finish report is retried until the controller answers
            try:
                answer = await self._post(
                    f"/api/v1/workers/{self.name}/jobs/{key[0]}/finished", body
                )
                if answer is not None:
                    self.result.finished += 1
                    break
            except aiohttp.ClientError:
                self.result.error("finished connection")
            await asyncio.sleep(0.5)
        self.done.add(key)
        self.running.pop(key, None)


async def _client(
    session: aiohttp.ClientSession, url: str, token: str, result: LoadResult, stop: asyncio.Event
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with session.post(
                url + "/api/v1/jobs", headers=headers, json={"command": "true", "user": "load"}
            ) as r:
                body = await r.json()
                if r.status == 201:
                    result.acknowledged.append(body["job_id"])
                    result.submit_latency.append(time.perf_counter() - started)
                else:
                    result.error(f"submit {r.status}")
        except aiohttp.ClientError:
            result.error("submit connection")
            await asyncio.sleep(0.2)  # the controller is down: do not spin


async def run_load(
    url: str,
    token: str,
    workers: int = 1000,
    clients: int = 64,
    seconds: float = 60.0,
    heartbeat_s: float = 5.0,
    job_s: float = 0.5,
    drain_timeout: float = 120.0,
) -> LoadResult:
    """Drive the controller at `url`, then check its final state against the submissions."""
    result = LoadResult(workers, clients, seconds)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sims = [
            SimWorker(f"sim{i:04d}", session, url, token, result, heartbeat_s, job_s)
            for i in range(workers)
        ]
        for i in range(0, workers, 50):  # register in waves, like a rack powering on
            await asyncio.gather(*(s.register() for s in sims[i : i + 50]))
        stop_workers, stop_clients = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(s.heartbeats(stop_workers)) for s in sims]
        tasks += [asyncio.create_task(s.poll(stop_workers)) for s in sims]
        submitters = [
            asyncio.create_task(_client(session, url, token, result, stop_clients))
            for _ in range(clients)
        ]
        await asyncio.sleep(seconds)
        stop_clients.set()
        await asyncio.gather(*submitters)
        drain_started = time.monotonic()
        headers = {"Authorization": f"Bearer {token}"}
        while time.monotonic() - drain_started < drain_timeout:
            async with session.get(
                url + "/api/v1/jobs?state=PEND,RUN&limit=1", headers=headers
            ) as r:
                if (await r.json())["total"] == 0:
                    break
            await asyncio.sleep(0.5)
        result.drain_seconds = time.monotonic() - drain_started
        async with session.get(url + "/api/v1/hosts", headers=headers) as r:
            hosts = (await r.json())["hosts"]
        result.falsely_unavailable = sorted(h["name"] for h in hosts if h["status"] != "online")
        stop_workers.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        listed: dict[str, dict[str, Any]] = {}
        while True:
            path = f"/api/v1/jobs?limit=100000&offset={len(listed)}"
            async with session.get(url + path, headers=headers) as r:
                page = (await r.json())["jobs"]
            listed.update((j["id"], j) for j in page)
            if len(page) < 100000:
                break
    acked = set(result.acknowledged)
    result.missing = sorted(acked - set(listed), key=int)
    result.unexpected = sorted(set(listed) - acked, key=int)
    result.not_done = {
        j: listed[j]["state"] for j in acked & set(listed) if listed[j]["state"] != "DONE"
    }
    return result


def report(result: LoadResult) -> str:
    rate = len(result.acknowledged) / result.seconds
    hb_rate = result.heartbeats / result.seconds
    lines = [
        f"workers {result.workers}, clients {result.clients}, {result.seconds:.0f} s",
        f"submits acknowledged      {len(result.acknowledged):>9,}  ({rate:,.0f}/s)",
        f"submit latency p50 / p99  {percentile(result.submit_latency, 0.5) * 1000:>9.1f} / "
        f"{percentile(result.submit_latency, 0.99) * 1000:.1f} ms",
        f"heartbeats                {result.heartbeats:>9,}  ({hb_rate:,.0f}/s)",
        f"heartbeat p50 / p99       {percentile(result.heartbeat_latency, 0.5) * 1000:>9.1f} / "
        f"{percentile(result.heartbeat_latency, 0.99) * 1000:.1f} ms",
        f"attempts started/finished {result.started:>9,} / {result.finished:,}",
        f"drain after the clients   {result.drain_seconds:>9.1f} s",
        f"hosts not online at end   {len(result.falsely_unavailable):>9}",
        f"acked but missing         {len(result.missing):>9}",
        f"acked but not DONE        {len(result.not_done):>9}",
        f"present but never acked   {len(result.unexpected):>9}",
        f"errors                    {result.errors or 'none'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    import tempfile
    from pathlib import Path

    from bench.controller import TOKEN, Controller

    with tempfile.TemporaryDirectory(prefix="xce-load-") as tmp, Controller(Path(tmp) / "c") as ctl:
        result = asyncio.run(run_load(ctl.url, TOKEN, args.workers, args.clients, args.seconds))
    print(report(result))
    clean = not (
        result.missing or result.not_done or result.unexpected or result.falsely_unavailable
    )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
