"""Figure 2: durable submissions per second through a real controller process.

The controller is started the way tests/integration/cluster.py does it (`python -m xce
controller -c cfg.toml`), with no worker, so every job stays pending. Each client is one
aiohttp session POSTing /api/v1/jobs in a loop; only requests that complete inside the
measurement window (after a warm-up) count.

Group-commit statistics are the controller's own: the count of its `xce_wal_group_records`
histogram (one observation per WAL group, hence per fdatasync) before and after the window,
from /metrics. (The syscw delta of /proc/PID/io counted them while the WAL writer was the only
writer; the audit trail's group appends, one per batch of submissions, now write too.)
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.common import Plan, Row, median, spread, stop_process
from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService

# One signing key folder for the bench; each controller's state gets a copy, so TOKEN (an
# admin login token) is valid on all of them.
KEYS = Path(tempfile.mkdtemp(prefix="xce-bench-keys-"))
atexit.register(shutil.rmtree, KEYS, True)
TOKEN = TokenService.open(KEYS, "xce", "xce-api", 12 * 3600.0, 86400.0).issue(
    "bench", (), ("admin",)
)[0]
BODY = json.dumps({"command": "true", "user": "bench"}).encode()
LEVELS = (1, 8, 64)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Controller:
    """One controller process in its own directory; `stop()` always leaves none behind."""

    def __init__(
        self, root: Path, fsync: str = "always", extra: str = "", tree: Path | None = None
    ) -> None:
        self.root = root
        self.fsync = fsync
        self.extra = extra  # more [controller] keys, e.g. for the soak run
        self.tree = tree  # another source tree to run (`source_tree`), else this checkout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "controller.log"

    def _config(self) -> Path:
        text = f"""
[cluster]
controllers = ["{self.url}"]

[controller]
listen = "127.0.0.1:{self.port}"
state_dir = "{self.root / "state"}"
wal_fsync = "{self.fsync}"
{self.extra}

[[queue]]
name = "normal"
priority = 30

[guard]
# The load harness simulates up to thousands of workers, all from 127.0.0.1: no cap on
# connections per address (the guard's default is 1,024).
max_connections_per_address = 0
"""
        path = self.root / "controller.toml"
        path.write_text(text)
        return path

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "state").mkdir(exist_ok=True, mode=0o700)
        if not key_dir(self.root / "state").exists():
            shutil.copytree(KEYS, key_dir(self.root / "state"))
        cfg = self._config()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.tree is not None:
            # `python -m` puts the working directory first on sys.path: run in the tree
            # too, or this checkout's package would shadow it.
            env["PYTHONPATH"] = str(self.tree)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xce", "controller", "-c", str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.tree,
            )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                        if resp.status == 200:
                            return
                except OSError:
                    time.sleep(0.05)
            raise RuntimeError(f"controller did not start:\n{self.log_text()}")
        except BaseException:
            self.stop()
            raise

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def __enter__(self) -> Controller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Load:
    clients: int
    seconds: float
    jobs_per_s: float
    groups: int
    records: int
    p50_ms: float
    p99_ms: float
    first_s: float  # jobs/s in the window's first and last second: pending jobs pile up
    last_s: float
    controller_cpu: float  # fraction of one core used by the controller during the window
    client_cpu: float  # the same for this (client) process
    errors: int

    @property
    def mean_group(self) -> float:
        return self.records / self.groups if self.groups else float("nan")

    @property
    def cpu_us_per_job(self) -> float:
        """The controller's CPU (user + system, all threads) per acknowledged submit."""
        return self.controller_cpu * self.seconds / self.records * 1e6 if self.records else 0.0


async def _wal_groups(session: aiohttp.ClientSession, url: str) -> int:
    """WAL groups written so far: the count of the controller's group-size histogram."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith("xce_wal_group_records_count "):
            return int(float(line.split()[1]))
    raise RuntimeError("the controller's /metrics has no xce_wal_group_records_count")


@dataclass(frozen=True)
class Target:
    """A submit endpoint to drive: XCE's `POST /api/v1/jobs` or another scheduler's REST
    submit (`bench.slurmrest`), so both sides of a comparison run one client loop."""

    url: str  # the address POSTed to
    headers: dict[str, str]  # auth and content type, sent on every request
    body: bytes  # one small job, the same JSON for every request
    status: int  # the answer that acknowledges a submission
    pids: tuple[int, ...]  # the server's processes: their CPU over the window is summed
    # WAL groups (fsyncs) written so far, read before and after the window; None: not known
    groups: Callable[[], Awaitable[int]] | None = None


def xce_target(url: str, pid: int) -> Target:
    """The controller at `url` (process `pid`), with the bench's admin token."""

    async def groups() -> int:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            return await _wal_groups(s, url)

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    return Target(url + "/api/v1/jobs", headers, BODY, 201, (pid,), groups)


def _probe(procs: list[psutil.Process]) -> tuple[float, float]:
    total = 0.0
    for proc in procs:
        cpu = proc.cpu_times()
        total += cpu.user + cpu.system
    return time.perf_counter(), total


async def drive(target: Target, clients: int, warmup: float, seconds: float) -> Load:
    """`clients` keep-alive sessions POSTing `target.body` in a loop; only answers that
    complete inside the window (after `warmup`) count, and only acknowledged ones."""
    procs = [psutil.Process(pid) for pid in target.pids]
    me = psutil.Process()
    stop = asyncio.Event()
    counting = False
    errors: list[str] = []
    latencies: list[float] = []
    finished: list[float] = []

    async def client() -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, headers=target.headers) as session:
            while not stop.is_set():
                started = time.perf_counter()
                async with session.post(target.url, data=target.body) as resp:
                    payload = await resp.read()
                    if resp.status != target.status:
                        errors.append(f"{resp.status} {payload[:200]!r}")
                        await asyncio.sleep(0.01)
                        continue
                if counting:
                    now = time.perf_counter()
                    finished.append(now)
                    latencies.append(now - started)

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    try:
        await asyncio.sleep(warmup)
        w0 = await target.groups() if target.groups else 0
        t0, c0 = _probe(procs)
        m0 = sum(me.cpu_times()[:2])
        counting = True
        await asyncio.sleep(seconds)
        counting = False
        t1, c1 = _probe(procs)
        m1 = sum(me.cpu_times()[:2])
        w1 = await target.groups() if target.groups else 0
        records = len(finished)
    finally:
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise RuntimeError(f"client failed: {failures[0]!r}")
    if errors and not records:
        raise RuntimeError(f"every submission failed, e.g. {errors[0]}")
    elapsed = t1 - t0
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    edge = min(1.0, elapsed / 3)
    first = sum(1 for t in finished if t < t0 + edge) / edge
    last = sum(1 for t in finished if t >= t1 - edge) / edge
    return Load(
        clients,
        elapsed,
        records / elapsed,
        w1 - w0,
        records,
        pct(0.5),
        pct(0.99),
        first,
        last,
        (c1 - c0) / elapsed,
        (m1 - m0) / elapsed,
        len(errors),
    )


def measure(
    plan: Plan, clients: int, fsync: str, run: int, tree: Path | None = None, tag: str = ""
) -> Load:
    root = plan.root / f"ctl-{fsync}-{clients}-{run}{tag}"
    with Controller(root, fsync, tree=tree) as ctl:
        assert ctl.proc is not None
        target = xce_target(ctl.url, ctl.proc.pid)
        load = asyncio.run(drive(target, clients, plan.http_warmup, plan.http_seconds))
        jobs = ctl.get("/api/v1/cluster")["jobs"]
        if jobs < load.records:
            raise RuntimeError(f"{load.records} submissions acknowledged, controller has {jobs}")
    with contextlib.suppress(OSError):
        for seg in (root / "state" / "wal").glob("*.seg"):
            seg.unlink()  # 64 MiB preallocated each; the disk is shared
    return load


def _row(label: str, runs: list[Load]) -> tuple[Row, float]:
    rates = [r.jobs_per_s for r in runs]
    mid = sorted(runs, key=lambda r: r.jobs_per_s)[len(runs) // 2]  # the median run
    rate = median(rates)
    group = (
        f"grp {mid.mean_group:.1f}, {mid.groups / mid.seconds:,.0f} fsync/s"
        if mid.mean_group < 1000
        else "1 fsync/s"
    )
    text = (
        f"{rate:,.0f} jobs/s ({spread(rates)}); p50 {mid.p50_ms:.1f} p99 "
        f"{mid.p99_ms:.0f} ms; {group}; 1st/last s {mid.first_s:,.0f}/{mid.last_s:,.0f}; "
        f"cpu ctl {mid.controller_cpu:.0%} cli {mid.client_cpu:.0%}"
    )
    if mid.errors:
        text += f"; {mid.errors} errors"
    data = {"jobs_per_s": rate, "runs": [vars(r) for r in runs]}
    return Row(label, text, data=data), rate


def run(plan: Plan, raw: dict[str, float]) -> list[Row]:
    results: dict[tuple[str, int], list[Load]] = {}
    configs = [("always", c) for c in LEVELS] + [("interval", 64)]
    for run_no in range(plan.http_runs):
        for fsync, clients in configs:  # interleaved: drift hits every level alike
            results.setdefault((fsync, clients), []).append(measure(plan, clients, fsync, run_no))
    rows: list[Row] = []
    rates: dict[int, float] = {}
    for clients in LEVELS:
        row, rates[clients] = _row(
            f"2  controller always, {clients} client{'s' * (clients > 1)}",
            results[("always", clients)],
        )
        rows.append(row)
    row, ceiling = _row(
        "2  controller interval, 64 clients (CPU ceiling)", results[("interval", 64)]
    )
    rows.append(row)
    limit = raw["batch_records"]
    ratio = rates[64] / limit
    rows.append(
        Row(
            "2  64 clients / 1b fsync limit",
            f"{ratio:.1%} ({rates[64]:,.0f} / {limit:,.0f} rec/s)",
            ">= 80 %",
            "PASS" if ratio >= 0.8 else "FAIL",
            data={"ratio": ratio},
        )
    )
    scale = rates[64] / rates[1]
    rows.append(
        Row("2  64 clients / 1 client", f"{scale:.2f}x", "-", "info", data={"ratio": scale})
    )
    cost = rates[64] / ceiling
    rows.append(
        Row(
            "2  64 clients always / interval",
            f"{cost:.1%} ({rates[64]:,.0f} / {ceiling:,.0f} jobs/s)",
            "-",
            "info",
            data={"ratio": cost},
        )
    )
    return rows
