"""Soak: a two-candidate HA controller pair under steady load, with kill -9 faults injected.

`python -m bench.soak --minutes 30 [--replication sync|async]` (also `python -m pytest -m
slow tests/integration/test_soak.py`, a short run by default, longer with XCE_SOAK_MINUTES).

Two controller candidates (`[cluster] controllers = [c0, c1]`, xce/ha) run as real
processes on 127.0.0.1, each with its own state directory: c0 starts as `xce controller` with
the signing keys, c1 as `xce standby` and receives them over replication. Simulated workers
(the real worker protocol, from `bench.load`) and submitting clients all use `XceClient` with
the candidate list, so they follow the primary by themselves; the clients pause while more
than `max_backlog` acknowledged jobs are unfinished (a steady state: a queue that grew all run
would say nothing about memory, and would not drain). The candidates run with a short
finished-job retention, so checkpoints purge continuously. Every 40-90 s one fault, in the
cycle failover, restart, standby, failover, standby, both, restart:

- failover: once the standby is caught up (sync mode: in sync and not degraded), kill -9 the
  primary; the standby takes over (takeover time: kill to the new primary serving), then the
  killed one is started again as `xce standby`;
- standby: kill -9 the standby and start it again (sync mode: the primary degrades to async
  until it is back and caught up);
- restart: once the standby is caught up, kill -9 the primary and start it again as
  `xce controller` after a random delay between 0 and twice `failover_timeout_s` (a service
  manager's quick restart racing the standby's takeover); whichever wins, one
  primary and one standby must come out of it;
- both: kill -9 both, start the former primary again (`xce controller`), then the other one
  (`xce standby`).

Checked at the end:

- nothing acknowledged is lost: every acknowledged job is either still held (and DONE) or
  was run by a worker (and then purged by retention after it finished); the controller
  dispatches only starts that are durable (in sync mode: on the standby too), so a job it
  forgot after acknowledging it would be neither. In async mode a failover may lose the last
  acknowledged records by design: those acknowledged shortly before a failover are reported
  as lost at a failover and do not fail the run (the same for a job run twice across one);
- no job ran twice (started by workers more than once);
- never two primaries of one epoch: both candidates' health answers are polled every 100 ms
  all run long, and no epoch may be seen with two different candidates as its primary;
- memory is bounded: the RSS of whichever process is primary, and of whichever is standby
  (like with like: roles move between the candidates), in the last quarter of the run stays
  within 1.5x of the second quarter's;
- the final state is the same on both candidates: once the standby has caught up (same
  sequence number), a switchover moves the primary role to it and its jobs are listed again;
  every job that neither could have purged yet (live, or finished within the retention
  window of the later listing) must be there in the same state.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.common import stop_process
from bench.controller import KEYS, TOKEN
from bench.load import LoadResult, SimWorker, percentile
from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService
from xce.client import ApiError, XceClient

RETENTION_S = 30.0
SOAK_CONFIG = f"""finished_retention_s = {RETENTION_S}
checkpoint_interval_s = 10.0
"""
FAULT_CYCLE = ("failover", "restart", "standby", "failover", "standby", "both", "restart")
# A lost or twice-run job counts as "at a failover" (async mode) if acknowledged this many
# seconds before a primary was killed (or up to 1 s after: our clock reads the answer late).
FAILOVER_WINDOW_S = 5.0

_ISSUER = TokenService.open(KEYS, "xce", "xce-api", 12 * 3600.0, 86400.0)
WORKER_TOKEN = _ISSUER.issue("soak-worker", (), ("worker",), "service")[0]
STANDBY_TOKEN = _ISSUER.issue("soak-standby", (), ("standby",), "service")[0]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_pair(taken: set[int]) -> int:
    """A free port p with p + 1 free too (the replication listener), outside the kernel's
    ephemeral range: a standby binds p + 1 only when it takes over, and the soak's hundreds
    of client connections would otherwise sooner or later hold it as their local port."""
    low, high = _ephemeral_range()
    first, last = (10000, low - 2) if low > 12000 else (high + 1, 65533)
    rng = random.Random()
    for _ in range(10000):
        port = rng.randint(first, last)
        if not {port, port + 1} & taken and _is_free(port) and _is_free(port + 1):
            taken.update((port, port + 1))
            return port
    raise RuntimeError("no free pair of ports outside the ephemeral range")


class Candidate:
    """One controller candidate process (`xce controller` or `xce standby`)."""

    def __init__(self, root: Path, index: int, ports: list[int], cluster: str) -> None:
        self.index = index
        self.root = root / f"c{index}"
        self.port = ports[index]
        self.url = f"http://127.0.0.1:{self.port}"
        self.urls = [f"http://127.0.0.1:{p}" for p in ports]
        self.cluster = cluster
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "controller.log"

    def _config(self) -> Path:
        urls = ", ".join(f'"{u}"' for u in self.urls)
        text = f"""
[cluster]
controllers = [{urls}]
{self.cluster}

[controller]
listen = "127.0.0.1:{self.port}"
state_dir = "{self.root / "state"}"
wal_fsync = "always"
replication_token = "{STANDBY_TOKEN}"
{SOAK_CONFIG}

[[queue]]
name = "normal"
priority = 30
"""
        path = self.root / "controller.toml"
        path.write_text(text)
        return path

    def spawn(self, role: str) -> None:
        """Start the process (`role`: controller or standby); does not wait for it."""
        assert self.proc is None or self.proc.poll() is not None
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        state = self.root / "state"
        state.mkdir(exist_ok=True, mode=0o700)
        if self.index == 0 and not key_dir(state).exists():
            shutil.copytree(KEYS, key_dir(state))  # the others get them over replication
        cfg = self._config()
        with self.log.open("ab") as out:
            out.write(f"\n===== soak: starting as {role} at {time.ctime()}\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xce", role, "-c", str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no final checkpoint."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(30)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc)

    def rss(self) -> int | None:
        try:
            return psutil.Process(self.proc.pid).memory_info().rss if self.proc else None
        except psutil.Error:
            return None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


class HaSimWorker(SimWorker):
    """`bench.load.SimWorker` over `XceClient`: follows the primary across the candidates,
    retries a finish report until the controller takes it, and (like the real worker)
    resends a delivered report when the controller still asks it to run that attempt."""

    def __init__(
        self,
        name: str,
        client: XceClient,
        result: LoadResult,
        heartbeat_s: float,
        job_s: float,
        started_at: dict[str, list[float]],
    ) -> None:
        super().__init__(
            name,
            None,
            client.base_url,
            "",
            result,  # type: ignore[arg-type]
            heartbeat_s,
            job_s,
        )
        self.client = client
        self.started_at = started_at
        self.resending: set[tuple[str, int]] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return await self.client.request("POST", path, json=body)
        except ApiError as exc:
            self.result.error(f"{path.split('/')[-1]} {exc.status or exc.code}")
        except (aiohttp.ClientError, TimeoutError):
            self.result.error(f"{path.split('/')[-1]} connection")
        return None

    async def poll(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            path = f"/api/v1/workers/{self.name}/assignments?version={self.version}&timeout=5"
            try:
                answer = await self.client.request("GET", path)
            except ApiError as exc:
                self.result.error(f"assignments {exc.status or exc.code}")
                await asyncio.sleep(0.5)
                continue
            except (aiohttp.ClientError, TimeoutError):
                self.result.error("assignments connection")
                await asyncio.sleep(0.5)
                continue
            self._apply(answer)

    def _apply(self, answer: dict[str, Any]) -> None:
        new: list[str] = []
        for item in answer["jobs"]:
            key = (item["job_id"], item["attempt"])
            if item["action"] != "run":
                continue
            if key in self.done:
                if key not in self.resending:  # the controller lost our report
                    self.resending.add(key)
                    self._spawn(self._resend(key))
            elif key not in self.running:
                new.append(key[0])
        super()._apply(answer)
        now = time.monotonic()
        for job_id in new:
            self.started_at.setdefault(job_id, []).append(now)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, key: tuple[str, int]) -> None:
        body = {"attempt": key[1], "exit_code": 0, "wall_time_s": self.job_s}
        path = f"/api/v1/workers/{self.name}/jobs/{key[0]}/finished"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # retried until the controller answers
            try:
                await self.client.request("POST", path, json=body)
                self.result.finished += 1
                return
            except ApiError as exc:
                self.result.error(f"finished {exc.status or exc.code}")
                if 400 <= exc.status < 500:
                    return  # refused (not a controller being away): give up
            except (aiohttp.ClientError, TimeoutError):
                self.result.error("finished connection")
            await asyncio.sleep(0.5)

    async def _run(self, key: tuple[str, int]) -> None:
        await asyncio.sleep(self.job_s)
        await self._finish(key)
        self.done.add(key)
        self.running.pop(key, None)

    async def _resend(self, key: tuple[str, int]) -> None:
        try:
            await self._finish(key)
        finally:
            self.resending.discard(key)


@dataclass
class Fault:
    kind: str  # failover, restart, standby or both
    at: float  # seconds into the run
    killed_at: float  # time.monotonic() of the (first) kill
    seconds: float  # failover: kill to the new primary serving; else kill to all back up
    outage: float | None = None  # failover: kill to the next acknowledged submission
    delay: float | None = None  # restart: kill to the killed primary's start again


@dataclass
class SoakResult:
    load: LoadResult
    replication: str = "sync"
    max_backlog: int = 2000
    faults: list[Fault] = field(default_factory=list)
    # (seconds into the run, candidate, role, bytes)
    rss: list[tuple[float, int, str, int]] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)  # time.monotonic() of each ack
    present: int = 0  # acknowledged jobs still held at the end
    ran: int = 0  # acknowledged jobs a worker started
    lost: list[str] = field(default_factory=list)
    lost_at_failover: list[str] = field(default_factory=list)  # async mode only
    ran_twice: list[str] = field(default_factory=list)
    ran_twice_at_failover: list[str] = field(default_factory=list)  # async mode only
    not_done: dict[str, str] = field(default_factory=dict)
    # (seconds into the run, attempts finished by the workers so far): stalls show here
    progress: list[tuple[float, int]] = field(default_factory=list)
    seqs: tuple[int, int] = (0, 0)  # primary, standby once caught up at the end
    jobs_held: tuple[int, int] = (0, 0)  # jobs listed on the last primary, then on the other
    compared: int = 0  # jobs neither may have purged yet, compared between the two
    state_diff: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # epoch -> the candidates seen as its primary (more than one: two primaries of an epoch)
    primaries: dict[int, set[int]] = field(default_factory=dict)
    health_polls: int = 0

    def longest_stall(self) -> float:
        """The longest stretch of samples in which no worker finished an attempt."""
        longest, since = 0.0, None
        for (t0, n0), (t1, n1) in zip(self.progress, self.progress[1:], strict=False):
            if n1 == n0:
                since = t0 if since is None else since
                longest = max(longest, t1 - since)
            else:
                since = None
        return longest

    def count(self, kind: str) -> int:
        return sum(1 for f in self.faults if f.kind == kind)

    @property
    def takeovers(self) -> list[float]:
        return [f.seconds for f in self.faults if f.kind == "failover"]

    @property
    def outages(self) -> list[float]:
        return [f.outage for f in self.faults if f.kind == "failover" and f.outage is not None]

    def rss_quarters(self, role: str) -> tuple[float, float]:
        """Median RSS of the processes in `role` in the second and in the last quarter."""
        samples = [(t, r) for t, _, ro, r in self.rss if ro == role]
        if not samples:
            return float("nan"), float("nan")
        end = self.load.seconds
        second = [r for t, r in samples if end / 4 <= t < end / 2] or [r for _, r in samples]
        last = [r for t, r in samples if t >= 3 * end / 4] or [r for _, r in samples]
        return statistics.median(second), statistics.median(last)

    def doubles(self) -> dict[int, list[int]]:
        return {e: sorted(c) for e, c in self.primaries.items() if len(c) > 1}

    def failures(self) -> list[str]:
        out = list(self.problems)
        if self.doubles():
            out.append(f"two primaries of one epoch: {self.doubles()}")
        if not self.load.acknowledged:
            out.append("no submission was acknowledged")
        if self.lost:
            out.append(f"{len(self.lost)} acknowledged jobs lost, e.g. {self.lost[:5]}")
        if self.ran_twice:
            out.append(f"{len(self.ran_twice)} jobs ran twice, e.g. {self.ran_twice[:5]}")
        if self.not_done:
            out.append(
                f"{len(self.not_done)} acknowledged jobs held but not DONE, e.g. "
                f"{list(self.not_done.items())[:5]}"
            )
        for role in ("primary", "standby"):
            second, last = self.rss_quarters(role)
            if not last <= 1.5 * second:
                out.append(f"{role} RSS grew from {second / 2**20:.1f} to {last / 2**20:.1f} MiB")
        if self.seqs[0] != self.seqs[1]:
            out.append(f"the standby did not catch up: seq {self.seqs[1]} != {self.seqs[0]}")
        if self.state_diff:
            out.append(f"the candidates' final states differ: {self.state_diff[:5]}")
        if not self.compared:
            out.append("no job was left to compare between the candidates")
        return out


class Pair:
    """The two candidates, seen from outside (health answers, processes)."""

    def __init__(self, root: Path, cluster: str, session: aiohttp.ClientSession) -> None:
        taken: set[int] = set()
        ports = [free_pair(taken) for _ in range(2)]
        self.cands = [Candidate(root, i, ports, cluster) for i in range(2)]
        self.urls = self.cands[0].urls
        self.session = session

    async def health(self, i: int) -> dict[str, Any] | None:
        if self.cands[i].proc is None:
            return None
        try:
            async with self.session.get(
                self.urls[i] + "/healthz", timeout=aiohttp.ClientTimeout(total=2)
            ) as r:
                return await r.json() if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def roles(self) -> list[str | None]:
        found = await asyncio.gather(self.health(0), self.health(1))
        return [h["role"] if h else None for h in found]

    async def wait_role(self, i: int, role: str, timeout: float = 60.0) -> float:
        """Seconds until candidate `i` says it is `role`."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            proc = self.cands[i].proc
            if proc is None or proc.poll() is not None:
                raise RuntimeError(
                    f"candidate {i} exited while waiting for it to be {role}:"
                    f"\n{self.cands[i].log_text()}"
                )
            h = await self.health(i)
            if h is not None and h["role"] == role:
                return time.monotonic() - started
            await asyncio.sleep(0.05)
        raise RuntimeError(
            f"candidate {i} was not {role} after {timeout:.0f} s:\n{self.cands[i].log_text()}"
        )

    async def primary(self) -> int:
        for _ in range(600):
            roles = await self.roles()
            if roles.count("primary") == 1:
                return roles.index("primary")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"no single primary: {await self.roles()}")

    async def wait_in_sync(self, p: int, sync: bool, timeout: float = 120.0) -> bool:
        """Until the primary `p` has a standby that acknowledges records as they come (sync
        mode: and is not degraded), so a failover now may lose nothing acknowledged."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                async with self.session.get(
                    self.urls[p] + "/api/v1/cluster",
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=5),
                ) as r:
                    ha = (await r.json())["ha"] if r.status == 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                ha = None
            if (
                ha is not None
                and ha["role"] == "primary"
                and not (sync and ha["degraded"])
                and any(s["in_sync"] and s["last_ack_s"] < 1.0 for s in ha["standbys"])
            ):
                return True
            await asyncio.sleep(0.2)
        return False

    async def seqs_caught_up(self, p: int, timeout: float = 60.0) -> tuple[int, int]:
        """(primary seq, standby seq), once equal (or the last seen after `timeout`)."""
        deadline = time.monotonic() + timeout
        seqs = (0, -1)
        while time.monotonic() < deadline:
            hp, hs = await self.health(p), await self.health(1 - p)
            if hp and hs:
                seqs = (hp["seq"], hs["seq"])
                if seqs[0] == seqs[1] and hp["role"] == "primary" and hs["role"] == "standby":
                    return seqs
            await asyncio.sleep(0.2)
        return seqs


async def _submitter(
    client: XceClient, result: SoakResult, stop: asyncio.Event, max_backlog: int
) -> None:
    load = result.load
    while not stop.is_set():
        if len(load.acknowledged) - load.finished > max_backlog:
            await asyncio.sleep(0.05)  # a steady state, not a queue that grows all run
            continue
        started = time.perf_counter()
        try:
            body = await client.submit({"command": "true", "user": "load"})
        except ApiError as exc:
            load.error(f"submit {exc.status or exc.code}")
            await asyncio.sleep(0.2)  # no primary right now: do not spin
            continue
        except (aiohttp.ClientError, TimeoutError):
            load.error("submit connection")
            await asyncio.sleep(0.2)
            continue
        load.acknowledged.append(body["job_id"])
        result.acked_at.append(time.monotonic())
        load.submit_latency.append(time.perf_counter() - started)


async def _list_jobs(client: XceClient) -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    while True:
        page = (await client.jobs(limit=100000, offset=len(jobs)))["jobs"]
        jobs.update((j["id"], j) for j in page)
        if len(page) < 100000:
            return jobs


async def _inject(
    pair: Pair, kind: str, result: SoakResult, started: float, restart_delay: float = 0.0
) -> None:
    sync = result.replication == "sync"
    p = await pair.primary()
    s = 1 - p
    if kind in ("failover", "restart") and not await pair.wait_in_sync(p, sync):
        result.problems.append(
            f"{time.monotonic() - started:.0f} s: the standby did not catch "
            f"up within 120 s; {kind} skipped"
        )
        return
    killed_at = time.monotonic()
    fault = Fault(kind, killed_at - started, killed_at, 0.0)
    if kind == "failover":
        pair.cands[p].kill()
        fault.seconds = await pair.wait_role(s, "primary")
        pair.cands[p].spawn("standby")
        await pair.wait_role(p, "standby")
    elif kind == "restart":
        pair.cands[p].kill()
        await asyncio.sleep(restart_delay)
        fault.delay = restart_delay
        pair.cands[p].spawn("controller")
        new = await pair.primary()  # the restarted one (quick) or the standby (takeover)
        await pair.wait_role(1 - new, "standby")
        fault.seconds = time.monotonic() - killed_at
    elif kind == "standby":
        pair.cands[s].kill()
        pair.cands[s].spawn("standby")
        await pair.wait_role(s, "standby")
        fault.seconds = time.monotonic() - killed_at
    else:
        pair.cands[p].kill()
        pair.cands[s].kill()
        pair.cands[p].spawn("controller")  # the longer log (it fsyncs before it ships)
        await pair.wait_role(p, "primary")
        pair.cands[s].spawn("standby")
        await pair.wait_role(s, "standby")
        fault.seconds = time.monotonic() - killed_at
    result.faults.append(fault)


async def _watch_epochs(pair: Pair, result: SoakResult, stop: asyncio.Event) -> None:
    """Every 100 ms, who says it is primary and of which epoch (see SoakResult.primaries)."""
    while not stop.is_set():
        found = await asyncio.gather(pair.health(0), pair.health(1))
        result.health_polls += 1
        for i, h in enumerate(found):
            if h is not None and h.get("role") == "primary" and h.get("epoch") is not None:
                result.primaries.setdefault(int(h["epoch"]), set()).add(i)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def _stuck(
    admin: XceClient, tasks: list[asyncio.Task[None]], sims: list[HaSimWorker], left: int
) -> str:
    """What the drain found when it timed out: for the report."""
    died = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
    hosts = await admin.hosts()
    status: dict[str, int] = {}
    for h in hosts:
        status[h["status"]] = status.get(h["status"], 0) + 1
    running = sum(len(s.running) for s in sims)
    states = {}
    for state in ("PEND", "RUN"):
        states[state] = (await admin.jobs(state=state, limit=1))["total"]
    return (
        f"the drain timed out with {left} jobs not finished ({states}); hosts {status}; "
        f"the workers run {running} attempts; {len(died)} worker/client tasks died"
        + (f", e.g. {died[0].exception()!r}" if died else "")
    )


async def _cancel(tasks: list[asyncio.Task[None]], sims: list[HaSimWorker]) -> None:
    """Stop every task that talks to the controllers (before their clients close)."""
    every = [*tasks, *(t for s in sims for t in [*s.tasks, *s.running.values()])]
    for task in every:
        task.cancel()
    await asyncio.gather(*every, return_exceptions=True)


async def run_soak(
    root: Path,
    minutes: float,
    workers: int = 100,
    clients: int = 8,
    fault_every: tuple[float, float] = (40.0, 90.0),
    seed: int = 1,
    replication: str = "sync",
    failover_timeout: float = 3.0,
    heartbeat: float = 0.5,
    faults: tuple[str, ...] = FAULT_CYCLE,
    max_backlog: int = 2000,
) -> SoakResult:
    if not faults or set(faults) - set(FAULT_CYCLE):
        raise ValueError(f"faults must be failover, restart, standby or both, got {faults}")
    rng = random.Random(seed)
    seconds = minutes * 60
    load = LoadResult(workers, clients, seconds)
    result = SoakResult(load, replication, max_backlog)
    started_at: dict[str, list[float]] = {}
    cluster = (
        f'replication = "{replication}"\nfailover_timeout_s = {failover_timeout}\n'
        f"heartbeat_interval_s = {heartbeat}"
    )
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        pair = Pair(root, cluster, session)
        worker_clients = [XceClient(pair.urls, WORKER_TOKEN) for _ in range(workers)]
        submit_clients = [XceClient(pair.urls, TOKEN) for _ in range(clients)]
        admin = XceClient(pair.urls, TOKEN, retry_for=60.0)
        sims: list[HaSimWorker] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            pair.cands[0].spawn("controller")
            await pair.wait_role(0, "primary")
            pair.cands[1].spawn("standby")
            await pair.wait_role(1, "standby")
            sims = [
                HaSimWorker(f"soak{i:03d}", c, load, 2.0, 0.3, started_at)
                for i, c in enumerate(worker_clients)
            ]
            await asyncio.gather(*(s.register() for s in sims))
            stop_workers, stop_clients = asyncio.Event(), asyncio.Event()
            tasks += [asyncio.create_task(s.heartbeats(stop_workers)) for s in sims]
            tasks += [asyncio.create_task(s.poll(stop_workers)) for s in sims]
            submitters = [
                asyncio.create_task(_submitter(c, result, stop_clients, max_backlog))
                for c in submit_clients
            ]
            tasks += submitters
            stop_watch = asyncio.Event()
            tasks.append(asyncio.create_task(_watch_epochs(pair, result, stop_watch)))
            started = time.monotonic()
            next_fault = started + rng.uniform(*fault_every)
            while (now := time.monotonic()) - started < seconds:
                await asyncio.sleep(5.0)
                result.progress.append((now - started, load.finished))
                roles = await pair.roles()
                for i, cand in enumerate(pair.cands):
                    rss = cand.rss()
                    if rss is not None and roles[i] in ("primary", "standby"):
                        result.rss.append((now - started, i, roles[i] or "", rss))
                if time.monotonic() >= next_fault:
                    kind = faults[len(result.faults) % len(faults)]
                    await _inject(
                        pair, kind, result, started, rng.uniform(0.0, 2 * failover_timeout)
                    )
                    next_fault = time.monotonic() + rng.uniform(*fault_every)
            stop_clients.set()
            await asyncio.gather(*submitters)
            # Drain: wait while the unfinished jobs keep going down (a stall of 60 s fails).
            drain_started = best_at = time.monotonic()
            best = left = -1
            while time.monotonic() - drain_started < 900:
                left = (await admin.jobs(state="PEND,RUN", limit=1))["total"]
                if left == 0:
                    break
                if best < 0 or left < best:
                    best, best_at = left, time.monotonic()
                elif time.monotonic() - best_at > 60:
                    break
                await asyncio.sleep(0.5)
            load.drain_seconds = time.monotonic() - drain_started
            if left:
                result.problems.append(await _stuck(admin, tasks, sims, left))
            stop_workers.set()
            stop_watch.set()
            await _cancel(tasks, sims)
            # The final state, on one candidate and then (after a switchover) on the other.
            p = await pair.primary()
            async with XceClient([pair.urls[p]], TOKEN, retry_for=30.0) as here:
                held = await _list_jobs(here)
            result.seqs = await pair.seqs_caught_up(p)
            await admin.request("POST", "/api/v1/cluster/switchover", json={"to": pair.urls[1 - p]})
            await pair.wait_role(1 - p, "primary")
            async with XceClient([pair.urls[1 - p]], TOKEN, retry_for=30.0) as there:
                other = await _list_jobs(there)
            listed_last = time.time()
            result.jobs_held = (len(held), len(other))
            cutoff = listed_last - RETENTION_S + 2.0  # neither has purged what ended later

            def keep(job: dict[str, Any]) -> bool:
                return job.get("end_time") is None or job["end_time"] >= cutoff

            a = {j: v["state"] for j, v in held.items() if keep(v)}
            b = {j: v["state"] for j, v in other.items() if keep(v)}
            result.compared = len(a.keys() | b.keys())
            result.state_diff = sorted(
                (
                    f"{j}: {a.get(j)} / {b.get(j)}"
                    for j in a.keys() | b.keys()
                    if a.get(j) != b.get(j)
                ),
                key=lambda line: int(line.split(":")[0]),
            )
        finally:
            await _cancel(tasks, sims)
            for c in [*worker_clients, *submit_clients, admin]:
                await c.close()
            for cand in pair.cands:
                cand.stop()
    for f in result.faults:
        if f.kind == "failover":
            i = bisect.bisect_right(result.acked_at, f.killed_at)
            if i < len(result.acked_at):
                f.outage = result.acked_at[i] - f.killed_at
    acked = set(load.acknowledged)
    present = set(held)
    # A job a worker ran was durably known to the controller (it dispatches only durable
    # starts), so if it is gone now, retention purged it after it finished. A job the
    # controller forgot after acknowledging it would never have been dispatched at all.
    lost = sorted(acked - present - set(load.starts), key=int)
    twice = sorted((j for j, n in load.starts.items() if n > 1), key=int)
    result.present = len(acked & present)
    result.ran = len(acked & set(load.starts))
    if replication == "async":
        kills = [f.killed_at for f in result.faults if f.kind == "failover"]
        acked_when = dict(zip(load.acknowledged, result.acked_at, strict=True))

        def near_failover(t: float) -> bool:
            return any(k - FAILOVER_WINDOW_S <= t <= k + 1.0 for k in kills)

        def across_failover(times: list[float]) -> bool:
            return any(min(times) <= k <= max(times) for k in kills)

        result.lost_at_failover = [j for j in lost if near_failover(acked_when[j])]
        lost = [j for j in lost if not near_failover(acked_when[j])]
        result.ran_twice_at_failover = [
            j for j in twice if across_failover(started_at.get(j, [0.0]))
        ]
        twice = [j for j in twice if j not in set(result.ran_twice_at_failover)]
    result.lost = lost
    result.ran_twice = twice
    result.not_done = {
        j: v["state"] for j, v in held.items() if j in acked and v["state"] != "DONE"
    }
    return result


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s"


def _delays(result: SoakResult) -> str:
    delays = [f.delay for f in result.faults if f.kind == "restart" and f.delay is not None]
    return ", ".join(f"{d:.2f}" for d in delays) + " s" if delays else "none"


def report(result: SoakResult) -> str:
    load = result.load
    lines = [
        f"soak: {load.seconds / 60:g} min, 2 controller candidates ({result.replication} "
        f"replication), {load.workers} simulated workers, {load.clients} clients "
        f"(pausing at {result.max_backlog:,} unfinished)",
        f"faults injected           {len(result.faults):>9}  ({result.count('failover')} "
        f"failovers: kill -9 primary; {result.count('restart')} kill -9 + quick restart of "
        f"the primary; {result.count('standby')} kill -9 + restart standby; "
        f"{result.count('both')} kill -9 + restart both)",
        f"takeover (kill -> new primary serving)   {_stat(result.takeovers)}",
        f"submit outage at failover (kill -> next ack)  {_stat(result.outages)}",
        f"quick restart of the primary (delays {_delays(result)}; kill -> one primary and "
        f"a standby)  {_stat([f.seconds for f in result.faults if f.kind == 'restart'])}",
        f"primaries per epoch (health every 100 ms, {result.health_polls:,} polls)  "
        f"{len(result.primaries)} epochs, {len(result.doubles())} with two primaries",
        f"restart both (kill -> both back)  "
        f"{_stat([f.seconds for f in result.faults if f.kind == 'both'])}",
        f"submits acknowledged      {len(load.acknowledged):>9,}",
        f"submit p99                {percentile(load.submit_latency, 0.99) * 1000:>9.1f} ms",
        f"drain after the clients   {load.drain_seconds:>9.1f} s",
        f"longest stall             {result.longest_stall():>9.1f} s  (no job ended; 5 s samples)",
        f"acked, still held at end  {result.present:>9,}",
        f"acked, run by a worker    {result.ran:>9,}",
        f"acked and lost            {len(result.lost):>9}",
    ]
    if result.replication == "async":
        lines.append(
            f"acked, lost at a failover {len(result.lost_at_failover):>9}  "
            "(async: by design, not a failure)"
        )
    lines.append(f"ran twice                 {len(result.ran_twice):>9}")
    if result.replication == "async":
        lines.append(
            f"ran twice across failover {len(result.ran_twice_at_failover):>9}  "
            "(async: by design, not a failure)"
        )
    lines.append(f"acked, held, not DONE     {len(result.not_done):>9}")
    for role in ("primary", "standby"):
        second, last = result.rss_quarters(role)
        lines.append(
            f"{role} RSS, median of 2nd / last quarter  {second / 2**20:,.1f} / "
            f"{last / 2**20:,.1f} MiB (ratio {last / second:.2f})"
        )
    lines += [
        f"final seq primary / standby (caught up)  {result.seqs[0]:,} / {result.seqs[1]:,}",
        f"final jobs held: primary / other after switchover  {result.jobs_held[0]:,} / "
        f"{result.jobs_held[1]:,}; {result.compared:,} not purgeable by either compared, "
        f"{len(result.state_diff)} differ",
        f"client errors (while a candidate was away)  {sum(load.errors.values()):,}  "
        f"({', '.join(f'{k}: {n:,}' for k, n in sorted(load.errors.items()))})",
    ]
    for problem in result.problems:
        lines.append(f"problem: {problem}")
    failures = result.failures()
    lines.append("result: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--replication", choices=("sync", "async"), default="sync")
    parser.add_argument(
        "--failover-timeout", type=float, default=3.0, help="cluster.failover_timeout_s (seconds)"
    )
    parser.add_argument(
        "--fault-every",
        type=float,
        nargs=2,
        default=(40.0, 90.0),
        metavar=("MIN", "MAX"),
        help="seconds between faults",
    )
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=2000,
        help="submitters pause while more acknowledged jobs than this have not finished yet",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the candidates' state goes (default: the temp folder)",
    )
    parser.add_argument(
        "--faults",
        default=",".join(FAULT_CYCLE),
        help="the fault cycle (failover, restart, standby, both), comma-separated",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xce-soak-", dir=args.dir) as tmp:
        result = asyncio.run(
            run_soak(
                Path(tmp),
                args.minutes,
                args.workers,
                args.clients,
                tuple(args.fault_every),
                args.seed,
                args.replication,
                args.failover_timeout,
                faults=tuple(args.faults.split(",")),
                max_backlog=args.max_backlog,
            )
        )
        print(report(result))
        if result.failures():
            kept = Path(tempfile.mkdtemp(prefix="xce-soak-logs-"))
            for log in Path(tmp).glob("c*/controller.log"):
                shutil.copy(log, kept / f"{log.parent.name}.log")
            print(f"controller logs kept in {kept}")
    return 0 if not result.failures() else 1


if __name__ == "__main__":
    sys.exit(main())
