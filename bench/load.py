"""Load: many simulated workers and submitting clients against one real controller.

`python -m bench.load [--workers 1000] [--clients 64] [--seconds 60] [--procs N] [--relay N]`
prints a table; the same `run_load` backs `tests/integration/test_load.py` (a smaller run by
default, the full one behind `-m slow`).

Each simulated worker speaks the real worker protocol over HTTP: register, heartbeat every
`heartbeat_s`, long-poll its assignments (`poll_s`, the real worker's `POLL_WAIT_S`), "run" each
assigned attempt for `job_s` seconds (no process: the point is the controller's load, not
the job's), then report it finished. The workers are spread over `procs` processes, one
asyncio loop each, so that the generator is not the limit at 10,000 hosts; each process
sends its counts and latencies back to this one when told to stop. With `--relay N` the
hosts of each process are grouped N to a heartbeat relay: their heartbeats go through the
product's batcher (xce/worker/agent/relay.py) to the controller's batch route, as a rack's
relay worker forwards them (the hop from each host to its relay runs on the relay's host,
not the controller's, and is left out). The clients submit small
jobs as fast as they are acknowledged, from this process. At the end the harness waits for
every acknowledged job to be DONE and checks the controller's state against what it was
told, exactly.

With the controller's pid (`python -m bench.load` always has it) the table also has the
controller's CPU time over the run (user + system, all threads: on a shared 2-core machine
the generator competes with it, so figures read best as cost per core) and its RSS at the
end; the scheduling-pass p99 comes from its `/metrics` histogram over the run, and hosts
marked unavailable at any time from its log.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psutil

from xce.client import ApiError
from xce.protocol.relay_keys import RelaySigner, proven
from xce.server.collector import pace_collector
from xce.worker.agent.link import HEARTBEAT_JITTER, POLL_WAIT_S
from xce.worker.agent.relay import HeartbeatBatcher, relayed


@dataclass
class LoadResult:
    workers: int
    clients: int
    seconds: float
    procs: int = 1
    relay: int = 0  # hosts per heartbeat relay (0: none)
    acknowledged: list[str] = field(default_factory=list)
    submit_latency: list[float] = field(default_factory=list)
    heartbeat_latency: list[float] = field(default_factory=list)
    heartbeats: int = 0
    started: int = 0
    finished: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    falsely_unavailable: list[str] = field(default_factory=list)
    # hosts the controller's log says it marked unavailable at any time during the run
    ever_unavailable: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    not_done: dict[str, str] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    drain_seconds: float = 0.0
    # job id -> attempts a simulated worker started (more than one: the job ran twice)
    starts: dict[str, int] = field(default_factory=dict)
    # the controller process over the run (None: its pid was not given)
    controller_cpu_s: float | None = None
    controller_rss_mb: float | None = None
    generator_cpu_s: float = 0.0  # the worker processes' and this one's, over the same time
    generator_lag: list[float] = field(default_factory=list)  # the worker processes' loops
    passes: int = 0
    listing_error: str = ""  # the final listing of jobs failed: nothing checked exactly
    pass_p99_s: float | None = None  # the upper bound of the histogram bucket holding it
    # requests the controller answered over the run and drain, by "METHOD route"
    requests: dict[str, int] = field(default_factory=dict)

    def error(self, what: str, count: int = 1) -> None:
        self.errors[what] = self.errors.get(what, 0) + count

    def merge(self, part: dict[str, Any]) -> None:
        """Add what one worker process measured (`_GroupResult.as_dict`)."""
        self.heartbeats += part["heartbeats"]
        self.heartbeat_latency.extend(part["heartbeat_latency"])
        self.started += part["started"]
        self.finished += part["finished"]
        self.generator_cpu_s += part["cpu_s"]
        self.generator_lag.extend(part["loop_lag"])
        for what, count in part["errors"].items():
            self.error(what, count)
        for job, count in part["starts"].items():
            self.starts[job] = self.starts.get(job, 0) + count


@dataclass
class _GroupResult:
    """What the workers of one process saw; sent back to the parent as plain data."""

    heartbeat_latency: list[float] = field(default_factory=list)
    heartbeats: int = 0
    started: int = 0
    finished: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0  # this process's CPU time from the start signal to the stop
    # set at the start signal: heartbeats before it (while the rest register) are not counted
    measuring: bool = False
    # how late this process's loop woke from 0.1 s sleeps: above a few 10 ms, the
    # generator itself (or the machine) adds to every latency it measures
    loop_lag: list[float] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def default_procs() -> int:
    """Worker processes when not told: one per CPU, at least two."""
    return max(2, os.cpu_count() or 1)


class SimWorker:
    """One fake host: the real protocol, fake jobs."""

    def __init__(
        self,
        name: str,
        session: aiohttp.ClientSession,
        url: str,
        token: str,
        result: _GroupResult,
        heartbeat_s: float,
        job_s: float,
        poll_s: int,
    ) -> None:
        self.name = name
        self.session = session
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.result = result
        self.heartbeat_s = heartbeat_s
        self.interval_s = heartbeat_s  # or the longer one the controller asks for
        self.job_s = job_s
        self.poll_s = poll_s
        self.version = -1
        self.running: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.done: set[tuple[str, int]] = set()
        # the relay this host's heartbeats go through (`--relay`), else straight, and the
        # relay key of its registration
        self.relay: HeartbeatBatcher | None = None
        self.signer = RelaySigner()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(self.url + path, json=body, headers=self.headers) as r:
            if r.status >= 400:
                self.result.error(f"{path.split('/')[-1]} {r.status}")
                return None
            return await r.json()

    async def register(self) -> None:
        """Register, retrying a dropped connection as the real worker does (the hosts
        that joined earlier are heartbeating and polling meanwhile)."""
        body = {"host": self.name, "slots": 2, "memory_mb": 4096}
        for _ in range(20):
            try:
                answer = await self._post("/api/v1/workers/register", body)
            except (aiohttp.ClientError, TimeoutError):
                self.result.error("register connection")
                await asyncio.sleep(0.5)
                continue
            if answer is not None:
                self._told(answer)
                self._apply(answer)
                self.signer.take(answer)
            return
        raise RuntimeError(f"{self.name} could not register")

    def _told(self, answer: dict[str, Any]) -> None:
        """Take the controller's heartbeat interval, as the real worker does (its own is
        the shortest it sends)."""
        told = answer.get("heartbeat_interval_s")
        if isinstance(told, int | float):
            self.interval_s = max(self.heartbeat_s, float(told))

    async def heartbeats(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(random.random() * self.heartbeat_s)  # spread them out
        while not stop.is_set():
            started = time.perf_counter()
            try:
                running = [{"job_id": j, "attempt": a} for (j, a) in self.running]
                if self.relay is not None and self.signer.key is not None:
                    answer = await self._relayed({"running": running})
                else:
                    path = f"/api/v1/workers/{self.name}/heartbeat"
                    answer = await self._post(path, {"running": running})
                if answer is not None:
                    if self.result.measuring:
                        self.result.heartbeats += 1
                        self.result.heartbeat_latency.append(time.perf_counter() - started)
                    self._told(answer)
            except (aiohttp.ClientError, TimeoutError):
                self.result.error("heartbeat connection")
            # the real worker's jitter (xce/worker/agent/link.py heartbeat_interval)
            await asyncio.sleep(self.interval_s * (1.0 - HEARTBEAT_JITTER * random.random()))

    async def _relayed(self, body: dict[str, Any]) -> Any:
        """A heartbeat through this host's relay (the product's batcher), signed and its
        answer's proof checked as the real worker does (xce/worker/agent/link.py)."""
        assert self.relay is not None and self.signer.key is not None
        signed = self.signer.sign(self.name, json.dumps(body))
        raw = msgspec.json.encode(signed)
        status, entry = await self.relay.relay(relayed(self.name, raw), len(raw))
        key = self.signer.key
        answer, why = proven(entry, key, self.name, signed.seq) if status == 200 else (None, "")
        if answer is None:
            self.result.error(f"relayed heartbeat {status} {why}".strip())
        return answer

    async def poll(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                path = (
                    f"/api/v1/workers/{self.name}/assignments?version={self.version}"
                    f"&timeout={self.poll_s}"
                )
                async with self.session.get(self.url + path, headers=self.headers) as r:
                    if r.status != 200:
                        self.result.error(f"assignments {r.status}")
                        await asyncio.sleep(0.5)
                        continue
                    self._apply(await r.json())
            except (aiohttp.ClientError, TimeoutError):
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
            except (aiohttp.ClientError, TimeoutError):
                self.result.error("finished connection")
            await asyncio.sleep(0.5)
        self.done.add(key)
        self.running.pop(key, None)


@dataclass(frozen=True)
class GroupPlan:
    """One worker process's share of the hosts and how they behave (picklable)."""

    url: str
    token: str
    first: int
    count: int
    heartbeat_s: float
    job_s: float
    poll_s: int
    relay: int = 0  # hosts per heartbeat relay (0: each host beats alone)
    # the loopback address this process's connections come from ("": the kernel's
    # choice): past ~28,000 connections one source address runs out of ports
    source: str = ""


async def _forward(session: aiohttp.ClientSession, plan: GroupPlan, body: bytes) -> Any:
    """A relay's batch to the controller, as `HeartbeatRelay` sends it (its own token)."""
    headers = {"Authorization": f"Bearer {plan.token}", "Content-Type": "application/json"}
    try:
        async with session.post(
            plan.url + "/api/v1/workers/heartbeats", data=body, headers=headers
        ) as r:
            answer = await r.json()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ApiError(0, "unreachable", str(exc)) from exc
    if r.status >= 400:
        raise ApiError(r.status, "refused", str(answer))
    return answer


async def _wait_mp(event: MpEvent) -> None:
    """Until another process sets `event`, without blocking this loop."""
    while not event.is_set():
        await asyncio.sleep(0.05)


async def _lag(into: list[float], stopping: asyncio.Event) -> None:
    """Sample how late this loop wakes from a 0.1 s sleep, until `stopping`."""
    loop = asyncio.get_running_loop()
    while not stopping.is_set():
        asked = loop.time() + 0.1
        await asyncio.sleep(0.1)
        into.append(loop.time() - asked)


async def _worker_group(plan: GroupPlan, go: MpEvent, stop: MpEvent, out: Any) -> None:
    result = _GroupResult()
    # A real worker keeps its connections between heartbeats: idle ones are kept for
    # longer than the longest heartbeat interval a controller asks for, so that the
    # shared pool does not open a new connection for most requests.
    local = (plan.source, 0) if plan.source else None
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=75, local_addr=local)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sims = [
            SimWorker(
                f"sim{i:05d}",
                session,
                plan.url,
                plan.token,
                result,
                plan.heartbeat_s,
                plan.job_s,
                plan.poll_s,
            )
            for i in range(plan.first, plan.first + plan.count)
        ]
        relays = []
        if plan.relay > 0:  # one batcher per group of hosts, as a rack's relay worker
            for start in range(0, len(sims), plan.relay):
                batcher = HeartbeatBatcher(functools.partial(_forward, session, plan))
                relays.append(batcher)
                for sim in sims[start : start + plan.relay]:
                    sim.relay = batcher
        stopping = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        for i in range(0, len(sims), 50):  # register in waves, like a rack powering on
            wave = sims[i : i + 50]
            await asyncio.gather(*(s.register() for s in wave))
            # then each heartbeats and polls at once, as a worker does: the start signal
            # only opens the measurement, not a burst of 10,000 first requests
            tasks += [asyncio.create_task(s.heartbeats(stopping)) for s in wave]
            tasks += [asyncio.create_task(s.poll(stopping)) for s in wave]
        out.put(("ready", plan.first))
        await _wait_mp(go)
        result.measuring = True
        cpu = time.process_time()
        tasks.append(asyncio.create_task(_lag(result.loop_lag, stopping)))
        await _wait_mp(stop)
        result.cpu_s = time.process_time() - cpu
        stopping.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        running = [t for s in sims for t in s.running.values()]
        await asyncio.gather(*running, return_exceptions=True)  # finish reports still owed
        # before the session closes: a batch still waiting would fail on a closed session
        await asyncio.gather(*(relay.close() for relay in relays))
    out.put(("result", result.as_dict()))


def worker_process(plan: GroupPlan, go: MpEvent, stop: MpEvent, out: Any) -> None:
    """The entry point of one worker process. Its collector is paced as the controller's is
    (xce/server/collector.py): at CPython's pace, 5,000 simulated hosts' waiting polls made
    a process spend a quarter of its time in full collections, time the controller beside
    it on the same cores did not get."""
    pace_collector()
    try:
        asyncio.run(_worker_group(plan, go, stop, out))
    except BaseException as exc:  # the parent must hear of it, not wait forever
        out.put(("failed", f"{type(exc).__name__}: {exc}"))
        raise


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
        except (aiohttp.ClientError, TimeoutError):
            result.error("submit connection")
            await asyncio.sleep(0.2)  # the controller is down: do not spin


async def _metrics(session: aiohttp.ClientSession, url: str, token: str) -> str:
    async with session.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}) as r:
        if r.status != 200:
            raise RuntimeError(f"/metrics answered {r.status}")
        return await r.text()


def _pass_histogram(text: str) -> dict[float, float]:
    """The controller's scheduling-pass histogram: cumulative count per bucket bound."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("xce_scheduling_pass_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _request_counts(text: str) -> dict[str, int]:
    """Requests answered so far by "METHOD route" (every status), from the controller's
    latency histogram's counts."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("xce_api_request_seconds_count{"):
            labels = dict(_LABEL.findall(line))
            key = f"{labels['method']} {labels['route']}"
            counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


def _histogram_p99(before: dict[float, float], after: dict[float, float]) -> tuple[int, float]:
    """Passes in the window and the bucket bound under which 99 % of them ran."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if total and count >= 0.99 * total:
            return int(total), bound
    return int(total), float("nan")


def marked_unavailable(log: Path | None, since: int) -> list[str]:
    """Hosts the controller's log (from byte `since`) says it marked unavailable."""
    if log is None or not log.exists():
        return []
    with log.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return sorted(
        {
            line.split("host ", 1)[1].split(" ", 1)[0]
            for line in text.splitlines()
            if "missed its heartbeats: marked unavailable" in line
        }
    )


async def run_load(
    url: str,
    token: str,
    workers: int = 1000,
    clients: int = 64,
    seconds: float = 60.0,
    heartbeat_s: float = 5.0,
    job_s: float = 0.5,
    drain_timeout: float = 120.0,
    procs: int = 1,
    poll_s: int = POLL_WAIT_S,
    pid: int | None = None,
    relay: int = 0,
    log: Path | None = None,
) -> LoadResult:
    """Drive the controller at `url`, then check its final state against the submissions.

    `pid` (the controller's) adds its CPU time and RSS to the result, `log` (its log file)
    the hosts it marked unavailable at any time."""
    procs = max(1, min(procs, workers))
    result = LoadResult(workers, clients, seconds, procs, relay)
    ctx = multiprocessing.get_context("spawn")  # no copy of this process's loop or sockets
    go, stop_workers, out = ctx.Event(), ctx.Event(), ctx.Queue()
    children = []
    share, extra = divmod(workers, procs)
    first = 0
    for n in range(procs):
        count = share + (n < extra)
        # a source address of its own for a process with more hosts than one address
        # has ports for its connections (a long poll each, and heartbeats)
        source = f"127.0.1.{n + 1}" if count > 10_000 and url.startswith("http://127.") else ""
        plan = GroupPlan(url, token, first, count, heartbeat_s, job_s, poll_s, relay, source)
        children.append(ctx.Process(target=worker_process, args=(plan, go, stop_workers, out)))
        first += count
    for child in children:
        child.start()
    controller = psutil.Process(pid) if pid is not None else None
    log_start = log.stat().st_size if log is not None and log.exists() else 0
    headers = {"Authorization": f"Bearer {token}"}
    try:
        for _ in children:  # every host registered before the clock starts
            kind, what = await asyncio.to_thread(out.get, True, 600)
            if kind == "failed":
                raise RuntimeError(f"a worker process failed: {what}")
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            metrics_before = await _metrics(session, url, token)
            cpu_before = sum(controller.cpu_times()[:2]) if controller else 0.0
            own_cpu = time.process_time()
            go.set()
            stop_clients = asyncio.Event()
            submitters = [
                asyncio.create_task(_client(session, url, token, result, stop_clients))
                for _ in range(clients)
            ]
            await asyncio.sleep(seconds)
            stop_clients.set()
            await asyncio.gather(*submitters)
            drain_started = time.monotonic()
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
            result.generator_cpu_s += time.process_time() - own_cpu
            if controller is not None:
                result.controller_cpu_s = sum(controller.cpu_times()[:2]) - cpu_before
                result.controller_rss_mb = controller.memory_info().rss / 2**20
            metrics_after = await _metrics(session, url, token)
            result.passes, result.pass_p99_s = _histogram_p99(
                _pass_histogram(metrics_before), _pass_histogram(metrics_after)
            )
            before = _request_counts(metrics_before)
            result.requests = {
                route: count - before.get(route, 0)
                for route, count in _request_counts(metrics_after).items()
                if count > before.get(route, 0)
            }
            stop_workers.set()
            for _ in children:
                kind, what = await asyncio.to_thread(out.get, True, 600)
                if kind == "failed":
                    raise RuntimeError(f"a worker process failed: {what}")
                result.merge(what)
            try:
                listed = await _all_jobs(session, url, headers)
            except (RuntimeError, aiohttp.ClientError, TimeoutError) as exc:
                result.listing_error = str(exc) or type(exc).__name__
    finally:
        stop_workers.set()
        go.set()
        for child in children:
            await asyncio.to_thread(child.join, 30)
            if child.is_alive():
                child.kill()
    result.ever_unavailable = marked_unavailable(log, log_start)
    if result.listing_error:
        return result  # the exact checks need the listing
    acked = set(result.acknowledged)
    result.missing = sorted(acked - set(listed), key=int)
    result.unexpected = sorted(set(listed) - acked, key=int)
    result.not_done = {
        j: listed[j]["state"] for j in acked & set(listed) if listed[j]["state"] != "DONE"
    }
    return result


async def _all_jobs(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Every job the controller lists, by id, a page of 100,000 at a time; a page refused
    is asked again (and what it said printed) before the run is given up."""
    listed: dict[str, dict[str, Any]] = {}
    while True:
        path = f"/api/v1/jobs?limit=100000&offset={len(listed)}"
        for _ in range(5):
            async with session.get(url + path, headers=headers) as r:
                body = await r.json()
            if r.status == 200:
                break
            print(f"listing jobs: HTTP {r.status}: {body}", file=sys.stderr)
            await asyncio.sleep(2)
        else:
            raise RuntimeError(f"listing jobs failed: HTTP {r.status}: {body}")
        page = body["jobs"]
        listed.update((j["id"], j) for j in page)
        if len(page) < 100000:
            return listed


def report(result: LoadResult) -> str:
    rate = len(result.acknowledged) / result.seconds
    hb_rate = result.heartbeats / result.seconds
    lines = [
        f"workers {result.workers} in {result.procs} processes, clients {result.clients}, "
        f"{result.seconds:.0f} s"
        + (f", heartbeats through relays of {result.relay} hosts" if result.relay else ""),
        f"submits acknowledged      {len(result.acknowledged):>9,}  ({rate:,.0f}/s)",
        f"submit latency p50 / p99  {percentile(result.submit_latency, 0.5) * 1000:>9.1f} / "
        f"{percentile(result.submit_latency, 0.99) * 1000:.1f} ms",
        f"heartbeats                {result.heartbeats:>9,}  ({hb_rate:,.0f}/s)",
        f"heartbeat p50 / p99       {percentile(result.heartbeat_latency, 0.5) * 1000:>9.1f} / "
        f"{percentile(result.heartbeat_latency, 0.99) * 1000:.1f} ms",
        f"scheduling passes, p99 <= {result.passes:>9,}  {result.pass_p99_s} s",
        f"attempts started/finished {result.started:>9,} / {result.finished:,}",
        f"drain after the clients   {result.drain_seconds:>9.1f} s",
        f"hosts not online at end   {len(result.falsely_unavailable):>9}",
        f"hosts ever marked down    {len(result.ever_unavailable):>9}",
        f"acked but missing         {len(result.missing):>9}",
        f"acked but not DONE        {len(result.not_done):>9}",
        f"present but never acked   {len(result.unexpected):>9}",
        f"errors                    {result.errors or 'none'}",
        *([f"NOT CHECKED: {result.listing_error}"] if result.listing_error else []),
    ]
    lines.append(
        f"generator loop lag p50/p99 {percentile(result.generator_lag, 0.5) * 1000:>9.1f} / "
        f"{percentile(result.generator_lag, 0.99) * 1000:.1f} ms"
    )
    if result.controller_cpu_s is not None:
        window = result.seconds + result.drain_seconds
        lines.append(
            f"controller CPU            {result.controller_cpu_s:>9.1f} s "
            f"({result.controller_cpu_s / window:.0%} of one core over run + drain)"
        )
        lines.append(
            f"load generator CPU        {result.generator_cpu_s:>9.1f} s "
            f"({result.generator_cpu_s / window:.0%} of one core, all its processes)"
        )
    if result.controller_rss_mb is not None:
        lines.append(f"controller RSS at end     {result.controller_rss_mb:>9.0f} MiB")
    if result.requests:
        acked = max(1, len(result.acknowledged))
        total = sum(result.requests.values())
        lines.append(f"controller requests       {total:>9,}  ({total / acked:.2f} per acked job)")
        for route, count in sorted(result.requests.items(), key=lambda kv: -kv[1])[:5]:
            lines.append(f"  {route:<56} {count / acked:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--procs", type=int, default=default_procs(), help="processes of simulated workers"
    )
    parser.add_argument(
        "--poll-s",
        type=int,
        default=POLL_WAIT_S,
        help=f"long-poll timeout (the real worker's: {POLL_WAIT_S})",
    )
    parser.add_argument(
        "--tree", type=Path, default=None, help="run the controller of another checkout"
    )
    parser.add_argument(
        "--relay",
        type=int,
        default=0,
        help="hosts per heartbeat relay (0: every host beats alone)",
    )
    args = parser.parse_args(argv)
    import tempfile

    from bench.controller import TOKEN, Controller

    with (
        tempfile.TemporaryDirectory(prefix="xce-load-") as tmp,
        Controller(Path(tmp) / "c", tree=args.tree) as ctl,
    ):
        assert ctl.proc is not None
        pace_collector()  # the clients' process, as the worker processes (worker_process)
        result = asyncio.run(
            run_load(
                ctl.url,
                TOKEN,
                args.workers,
                args.clients,
                args.seconds,
                procs=args.procs,
                poll_s=args.poll_s,
                relay=args.relay,
                pid=ctl.proc.pid,
                log=ctl.log,
            )
        )
    print(report(result))
    clean = not (
        result.listing_error
        or result.missing
        or result.not_done
        or result.unexpected
        or result.falsely_unavailable
        or result.ever_unavailable
    )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
