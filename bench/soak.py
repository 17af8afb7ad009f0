"""Soak: hours of steady load with the controller killed (-9) and restarted at random.

`python -m bench.soak --minutes 30` (also `python -m pytest -m slow tests/integration/
test_soak.py`, with XCE_SOAK_MINUTES). Simulated workers and clients from `bench.load` keep
submitting and running jobs; the controller runs with a short finished-job retention so
checkpoints purge continuously. Checked at the end:

- nothing acknowledged is lost: every acknowledged job is either still in the controller
  (and DONE) or was run by a worker (and then purged by retention after it finished) — the
  controller dispatches only starts that are durable, so a job it forgot after acknowledging
  it would be neither;
- no job ran twice (started by workers more than once);
- memory is bounded: the controller's RSS in the last quarter of the run stays within 1.5x
  of the second quarter's (after warm-up), even though it has by then run many times as many
  jobs as it holds.
HA failovers join the injected faults once standbys exist (issue 6).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from bench.controller import TOKEN, Controller
from bench.load import LoadResult, SimWorker, _client, percentile

SOAK_CONFIG = """finished_retention_s = 30.0
checkpoint_interval_s = 10.0
"""


@dataclass
class SoakResult:
    load: LoadResult
    restarts: int = 0
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds into run, bytes)
    lost: list[str] = field(default_factory=list)
    ran_twice: list[str] = field(default_factory=list)
    not_done: dict[str, str] = field(default_factory=dict)

    def rss_quarters(self) -> tuple[float, float]:
        """Median RSS of the second and of the last quarter of the run."""
        n = len(self.rss)
        second = [r for _, r in self.rss[n // 4: n // 2]] or [r for _, r in self.rss]
        last = [r for _, r in self.rss[3 * n // 4:]] or [r for _, r in self.rss]
        return statistics.median(second), statistics.median(last)


def _rss(ctl: Controller) -> int | None:
    try:
        return psutil.Process(ctl.proc.pid).memory_info().rss if ctl.proc else None
    except psutil.Error:
        return None


async def run_soak(root: Path, minutes: float, workers: int = 100, clients: int = 8,
                   restart_every: tuple[float, float] = (40.0, 90.0),
                   seed: int = 1) -> SoakResult:
    rng = random.Random(seed)
    seconds = minutes * 60
    load = LoadResult(workers, clients, seconds)
    result = SoakResult(load)
    ctl = Controller(root / "c", extra=SOAK_CONFIG)
    await asyncio.to_thread(ctl.start)
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=30)) as session:
            sims = [SimWorker(f"soak{i:03d}", session, ctl.url, TOKEN, load, 2.0, 0.3)
                    for i in range(workers)]
            await asyncio.gather(*(s.register() for s in sims))
            stop_workers, stop_clients = asyncio.Event(), asyncio.Event()
            tasks = [asyncio.create_task(s.heartbeats(stop_workers)) for s in sims]
            tasks += [asyncio.create_task(s.poll(stop_workers)) for s in sims]
            submitters = [asyncio.create_task(_client(session, ctl.url, TOKEN, load,
                                                      stop_clients)) for _ in range(clients)]
            started = time.monotonic()
            next_restart = started + rng.uniform(*restart_every)
            while (now := time.monotonic()) - started < seconds:
                await asyncio.sleep(5.0)
                rss = _rss(ctl)
                if rss is not None:
                    result.rss.append((now - started, rss))
                if now >= next_restart:
                    assert ctl.proc is not None
                    ctl.proc.kill()  # SIGKILL: no clean shutdown, no final checkpoint
                    ctl.proc.wait(30)
                    ctl.proc = None
                    await asyncio.to_thread(ctl.start)
                    result.restarts += 1
                    next_restart = time.monotonic() + rng.uniform(*restart_every)
            stop_clients.set()
            await asyncio.gather(*submitters)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            drain_started = time.monotonic()
            while time.monotonic() - drain_started < 120:
                async with session.get(ctl.url + "/api/v1/jobs?state=PEND,RUN&limit=1",
                                       headers=headers) as r:
                    if (await r.json())["total"] == 0:
                        break
                await asyncio.sleep(0.5)
            load.drain_seconds = time.monotonic() - drain_started
            stop_workers.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            present: dict[str, str] = {}
            while True:
                path = f"/api/v1/jobs?limit=100000&offset={len(present)}"
                async with session.get(ctl.url + path, headers=headers) as r:
                    page = (await r.json())["jobs"]
                present.update((j["id"], j["state"]) for j in page)
                if len(page) < 100000:
                    break
    finally:
        ctl.stop()
    acked = set(load.acknowledged)
    # A job a worker ran was durably known to the controller (it dispatches only durable
    # starts), so if it is gone now, retention purged it after it finished. A job the
    # controller forgot after acknowledging it would never have been dispatched at all.
    result.lost = sorted(acked - set(present) - set(load.starts), key=int)
    result.ran_twice = sorted((j for j, n in load.starts.items() if n > 1), key=int)
    result.not_done = {j: s for j, s in present.items() if j in acked and s != "DONE"}
    return result


def report(result: SoakResult) -> str:
    second, last = result.rss_quarters()
    load = result.load
    return "\n".join([
        f"soak: {load.seconds / 60:.0f} min, {load.workers} simulated workers, "
        f"{load.clients} clients, {result.restarts} controller kill -9 + restart",
        f"submits acknowledged      {len(load.acknowledged):>9,}",
        f"submit p99                {percentile(load.submit_latency, .99) * 1000:>9.1f} ms",
        f"acked and lost            {len(result.lost):>9}",
        f"ran twice                 {len(result.ran_twice):>9}",
        f"acked, present, not DONE  {len(result.not_done):>9}",
        f"controller RSS, median of 2nd / last quarter  {second / 2**20:,.1f} / "
        f"{last / 2**20:,.1f} MiB (ratio {last / second:.2f})",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xce-soak-") as tmp:
        result = asyncio.run(run_soak(Path(tmp), args.minutes, args.workers, args.clients))
    print(report(result))
    second, last = result.rss_quarters()
    ok = not (result.lost or result.ran_twice or result.not_done) and last <= 1.5 * second
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
