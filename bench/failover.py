"""Figure 12: high availability with real processes on 127.0.0.1 (xce/ha).

The clusters are `tests/integration/ha_cluster.py`'s HaCluster: candidate 0 starts as
primary with `xce controller`, candidate 1 follows with `xce standby`, each with its own
state directory and replication on its listen port + 1; `failover_timeout_s = 2.0`,
heartbeats every 0.3 s, `sync_timeout_s = 5.0`.

- **Failover**: primary + standby + one real worker (`xce worker`: with two candidates a
  primary that lost the other one keeps its write lease through worker contact). Eight
  clients submit held jobs (nothing runs) to whichever candidate is primary, like the real
  client; during that burst the primary gets SIGKILL. Measured: from the kill until the
  survivor answers /healthz with role primary *and* accepted a submit (probed every 20 ms;
  the verdict is on the slowest round). Then the killed candidate is restarted with `xce
  standby` and the bench waits until it has caught up; the next round kills the other one,
  so the roles alternate. Each round also checks which acknowledged submissions the new
  primary lacks: in `async` mode a record acknowledged but not yet shipped when the primary
  died is lost by design (that is what `sync` is for).
- **Replication under the submit benchmark**: N clients (figure 2's request: one aiohttp
  session each, POST /api/v1/jobs in a loop, no worker so jobs stay pending) against the
  primary with one standby connected, for a fixed window after a warm-up. The standby's lag
  in records is sampled from GET /api/v1/cluster (`ha.standbys[].lag_records`) every 0.1 s;
  after the clients stop, the bench times how long the lag takes to reach 0. The same load
  runs against a lone controller (one candidate: no replication at all) and in `replication
  = "sync"`; runs are interleaved so that drift hits every mode alike.

`python -m bench.failover [--full]` runs this figure alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import psutil

from bench.common import Plan, Row, median, spread

if TYPE_CHECKING:
    from tests.integration.ha_cluster import HaCluster

FAILOVER_TIMEOUT_S = 2.0
TARGET_S = 5.0
BURST_CLIENTS = 8
BODY = json.dumps({"command": "true", "user": "bench"}).encode()


@dataclass(frozen=True)
class Sizes:
    rounds: int  # failovers (async)
    sync_rounds: int  # failovers in sync mode (the lost-acknowledgement check)
    burst_before: float  # seconds of submissions before the kill
    clients: int  # submit benchmark
    warmup: float
    seconds: float
    runs: int  # per replication mode

    @classmethod
    def of(cls, plan: Plan) -> Sizes:
        if plan.quick:
            return cls(
                rounds=3,
                sync_rounds=2,
                burst_before=0.8,
                clients=16,
                warmup=0.5,
                seconds=3.0,
                runs=2,
            )
        return cls(
            rounds=10, sync_rounds=4, burst_before=1.5, clients=64, warmup=1.0, seconds=8.0, runs=3
        )


def _cluster(root: Path, candidates: int, replication: str = "async") -> HaCluster:
    # Imported here: the helper lives with the integration tests (it needs the repository
    # checkout), and a missing one should fail this figure only, not the whole bench.
    from tests.integration.ha_cluster import HaCluster

    cluster = HaCluster(
        root, candidates, failover_timeout=FAILOVER_TIMEOUT_S, replication=replication
    )
    cluster.wal_segment_mb = 64  # the product default, not the tests' 1 MiB
    return cluster


def _headers() -> dict[str, str]:
    from tests.integration.cluster import ADMIN_TOKEN

    return {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}


def _stop(cluster: HaCluster) -> None:
    """Stop every process of the cluster (also SIGSTOPped or half-started ones), then drop
    its files: each candidate preallocates 64 MiB WAL segments and the disk is shared."""
    try:
        cluster.stop()
    finally:
        for proc in [*cluster.candidates.values(), *cluster.workers.values()]:
            with contextlib.suppress(OSError):
                proc.kill()
        shutil.rmtree(cluster.root, ignore_errors=True)


def _dump_logs(cluster: HaCluster) -> None:
    with contextlib.suppress(OSError):
        print(cluster.log_text(), file=sys.stderr)


# --- failover -------------------------------------------------------------------------------


@dataclass
class Failover:
    seconds: float  # kill -> role primary and a submit accepted
    role_s: float  # kill -> /healthz says primary
    client_s: float  # kill -> a burst client's first acknowledgement from the new primary
    acked_before: int  # burst submissions acknowledged before the kill
    lost: int  # of those (and of the ones in flight), absent on the new primary
    rejoin_s: float = 0.0  # restart of the killed one until it caught up


async def _burst_client(
    session: aiohttp.ClientSession,
    urls: list[str],
    tag: str,
    acked: list[tuple[float, str]],
    stop: asyncio.Event,
) -> None:
    """Submit held jobs named `tag`-n as fast as acknowledged; on a refused connection or a
    503 try the next candidate (the real client does the same)."""
    current, n, misses = 0, 0, 0
    while not stop.is_set():
        name = f"{tag}-{n}"
        body = {"command": "true", "user": "bench", "name": name, "hold": True}
        try:
            async with session.post(urls[current] + "/api/v1/jobs", json=body) as resp:
                await resp.read()
                ok = resp.status == 201
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        if ok:
            acked.append((time.perf_counter(), name))
            n += 1
            misses = 0
            continue
        current = (current + 1) % len(urls)
        misses += 1
        if misses >= len(urls):
            await asyncio.sleep(0.05)  # nobody primary: do not spin
            misses = 0


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as resp:
        if resp.status != 200:
            return None
        return await resp.json()


async def _one_failover(
    cluster: HaCluster, dead: int, survivor: int, round_no: int, burst_before: float
) -> Failover:
    urls = list(cluster.candidate_urls)
    acked: list[tuple[float, str]] = []
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(
        headers=_headers(), timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    ) as session:
        tasks = [
            asyncio.create_task(_burst_client(session, urls, f"r{round_no}c{c}", acked, stop))
            for c in range(BURST_CLIENTS)
        ]
        try:
            await asyncio.sleep(burst_before)
            if not acked:
                raise RuntimeError("no submission acknowledged before the kill")
            proc = cluster.candidates[dead]  # stays listed (so cleaned up) until replaced
            killed = time.perf_counter()
            proc.kill()  # SIGKILL: no goodbye to the standby, no final checkpoint
            acked_before = len(acked)
            deadline = killed + 30
            role_at = None
            target = urls[survivor]
            while time.perf_counter() < deadline:  # /healthz says primary
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    health = await _get_json(session, target + "/healthz")
                    if health and health.get("role") == "primary":
                        role_at = time.perf_counter()
                        break
                await asyncio.sleep(0.02)
            if role_at is None:
                raise RuntimeError(f"candidate {survivor} not primary 30 s after the kill")
            accepted_at = None
            probe = {"command": "true", "user": "bench", "name": f"probe{round_no}", "hold": True}
            while time.perf_counter() < deadline:  # and takes a submit
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.post(target + "/api/v1/jobs", json=probe) as resp:
                        await resp.read()
                        if resp.status == 201:
                            accepted_at = time.perf_counter()
                            break
                await asyncio.sleep(0.02)
            if accepted_at is None:
                raise RuntimeError(f"candidate {survivor} took no submit 30 s after the kill")
            await asyncio.sleep(0.5)  # the clients carry on against the new primary
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(proc.wait, 10)
        after = [at for at, _ in acked[acked_before:]]
        client_s = (min(after) - killed) if after else float("nan")
        present: set[str] = set()
        while True:
            page = await _get_json(
                session, f"{target}/api/v1/jobs?limit=100000&offset={len(present)}"
            )
            if page is None:
                raise RuntimeError("the new primary did not list its jobs")
            present.update(j["name"] for j in page["jobs"])
            if len(page["jobs"]) < 100000:
                break
    lost = sum(1 for _, name in acked if name not in present)
    return Failover(accepted_at - killed, role_at - killed, client_s, acked_before, lost)


def _wait_in_sync(cluster: HaCluster, primary: int) -> None:
    """Until the primary counts its standby in sync (and, in sync mode, is not degraded):
    only then does a sync-mode acknowledgement mean the standby holds the record. Its last
    probe round must have reached the standby too: that renews its write lease (without a
    worker, a new primary holds one only for `failover_timeout_s / 2` after it started)."""
    url = cluster.candidate_urls[primary]

    def check() -> bool:
        with contextlib.suppress(OSError, ValueError):
            req = urllib.request.Request(url + "/api/v1/cluster", headers=_headers())
            with urllib.request.urlopen(req, timeout=5) as resp:
                ha = json.loads(resp.read())["ha"]
            return (
                not ha["degraded"]
                and any(s["in_sync"] for s in ha["standbys"])
                and all(c["reachable"] for c in ha["candidates"])
            )
        return False

    cluster.wait_for(check, 30, f"candidate {primary}'s standby in sync")


def _failovers(plan: Plan, sizes: Sizes, replication: str, rounds: int) -> list[Failover]:
    cluster = _cluster(plan.root / f"failover-{replication}", 2, replication)
    results: list[Failover] = []
    try:
        cluster.start_candidate(0)
        # a starting controller is a standby until it wins its term (xce/ha): the worker
        # and the clients need a primary to talk to
        if cluster.wait_primary() != 0:
            raise RuntimeError("candidate 0 did not become the primary")
        cluster.start_candidate(1, "standby")
        cluster.start_worker("w1")
        cluster.wait_caught_up(1)
        _wait_in_sync(cluster, 0)
        primary = 0
        for round_no in range(rounds):
            survivor = 1 - primary
            result = asyncio.run(
                _one_failover(cluster, primary, survivor, round_no, sizes.burst_before)
            )
            started = time.perf_counter()
            cluster.start_candidate(primary, "standby")  # the killed one comes back
            cluster.wait_caught_up(primary, 60)
            result.rejoin_s = time.perf_counter() - started
            _wait_in_sync(cluster, survivor)
            results.append(result)
            primary = survivor
    except BaseException:
        _dump_logs(cluster)
        raise
    finally:
        _stop(cluster)
    return results


# --- replication under load -----------------------------------------------------------------


@dataclass
class LoadRun:
    mode: str  # solo (one candidate), async, sync
    acknowledged: int  # in the window
    jobs_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    lag: list[int] = field(default_factory=list)  # sampled during the window
    catch_up_s: float = float("nan")  # clients stopped -> lag 0
    primary_cpu: float = 0.0  # share of one core during the window
    standby_cpu: float = 0.0
    client_cpu: float = 0.0
    degraded: int = 0  # sync mode: "degraded to async" alerts during the load
    error_kinds: dict[str, int] = field(default_factory=dict)  # status and code -> count


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    with contextlib.suppress(psutil.Error):
        times = proc.cpu_times()
        return times.user + times.system
    return 0.0


async def _lags(session: aiohttp.ClientSession, url: str) -> list[int] | None:
    """Each standby's lag in records, from the primary's GET /api/v1/cluster."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        view = await _get_json(session, url + "/api/v1/cluster")
        if view is not None:
            return [s["lag_records"] for s in view["ha"]["standbys"]]
    return None


def _error_kind(status: int, payload: bytes) -> str:
    try:
        error = json.loads(payload)["error"]
        code = f"{error['code']}: {error['message'][:60]}"
    except (ValueError, KeyError, TypeError):
        code = payload[:60].decode(errors="replace")
    return f"{status} {code}"


async def _submit_load(
    url: str, pids: list[int], clients: int, warmup: float, seconds: float, mode: str
) -> LoadRun:
    procs = [psutil.Process(p) for p in pids] + [None]
    me = psutil.Process()
    stop = asyncio.Event()
    counting = False
    latencies: list[float] = []
    errors: list[str] = []
    lag: list[int] = []

    async def client() -> None:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1), headers=_headers()
        ) as session:
            while not stop.is_set():
                started = time.perf_counter()
                async with session.post(url + "/api/v1/jobs", data=BODY) as resp:
                    payload = await resp.read()
                    if resp.status != 201:
                        errors.append(_error_kind(resp.status, payload))
                        await asyncio.sleep(0.01)
                        continue
                if counting:
                    latencies.append(time.perf_counter() - started)

    async with aiohttp.ClientSession(
        headers=_headers(), timeout=aiohttp.ClientTimeout(total=10)
    ) as admin:
        tasks = [asyncio.create_task(client()) for _ in range(clients)]
        try:
            await asyncio.sleep(warmup)
            t0, c0, m0 = time.perf_counter(), [_cpu(p) for p in procs], _cpu(me)
            counting = True
            while time.perf_counter() - t0 < seconds:
                if mode != "solo" and (found := await _lags(admin, url)):
                    lag.append(max(found))
                await asyncio.sleep(0.1)
            counting = False
            t1, c1, m1 = time.perf_counter(), [_cpu(p) for p in procs], _cpu(me)
        finally:
            stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise RuntimeError(f"client failed: {failures[0]!r}")
        catch_up = float("nan")
        if mode != "solo":
            stopped = time.perf_counter()
            while time.perf_counter() - stopped < 60:
                found = await _lags(admin, url)
                if found and max(found) == 0:
                    catch_up = time.perf_counter() - stopped
                    break
                await asyncio.sleep(0.01)
            else:
                raise RuntimeError("the standby did not catch up within 60 s of the load")
    if not latencies:
        raise RuntimeError(f"no submission acknowledged, e.g. {errors[:1]}")
    elapsed = t1 - t0
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    kinds: dict[str, int] = {}
    for kind in errors:
        kinds[kind] = kinds.get(kind, 0) + 1
    return LoadRun(
        mode,
        len(latencies),
        len(latencies) / elapsed,
        pct(0.5),
        pct(0.99),
        len(errors),
        lag,
        catch_up,
        primary_cpu=(c1[0] - c0[0]) / elapsed,
        standby_cpu=(c1[1] - c0[1]) / elapsed,
        client_cpu=(m1 - m0) / elapsed,
        error_kinds=kinds,
    )


def _measure(plan: Plan, sizes: Sizes, mode: str, run_no: int) -> LoadRun:
    cluster = _cluster(
        plan.root / f"load-{mode}-{run_no}",
        1 if mode == "solo" else 2,
        "async" if mode == "solo" else mode,
    )
    try:
        cluster.start_candidate(0)
        if cluster.wait_primary() != 0:  # a standby until it wins its term
            raise RuntimeError("candidate 0 did not become the primary")
        pids = [cluster.candidates[0].pid]
        if mode != "solo":
            cluster.start_candidate(1, "standby")
            cluster.wait_caught_up(1)
            pids.append(cluster.candidates[1].pid)
            _wait_in_sync(cluster, 0)
        cluster.post("/api/v1/jobs", {"command": "true", "user": "bench"}, retry_for=20)
        log = cluster.root / "controller0.log"
        before = log.stat().st_size  # a sync primary alerts until its first standby connects
        result = asyncio.run(
            _submit_load(
                cluster.candidate_urls[0], pids, sizes.clients, sizes.warmup, sizes.seconds, mode
            )
        )
        with log.open("rb") as f:
            f.seek(before)
            result.degraded = f.read().count(b"ALERT: sync replication degraded")
        jobs = cluster.get("/api/v1/cluster")["jobs"]
        if mode != "solo":
            primary = cluster.health(0) or {}
            standby = cluster.health(1) or {}
            if standby.get("seq", -1) < primary.get("seq", 0):
                raise RuntimeError(
                    f"standby at record {standby.get('seq')}, primary at "
                    f"{primary.get('seq')} after its lag reached 0"
                )
        if jobs < result.acknowledged:
            raise RuntimeError(
                f"{result.acknowledged} submissions acknowledged, the primary holds {jobs} jobs"
            )
        return result
    except BaseException:
        _dump_logs(cluster)
        raise
    finally:
        _stop(cluster)


# --- the figure -----------------------------------------------------------------------------


def _pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _median_run(runs: list[LoadRun]) -> LoadRun:
    return sorted(runs, key=lambda r: r.jobs_per_s)[len(runs) // 2]


def run(plan: Plan) -> list[Row]:
    sizes = Sizes.of(plan)
    rows: list[Row] = []
    fails = _failovers(plan, sizes, "async", sizes.rounds)
    times = [f.seconds for f in fails]
    worst = max(times)
    rows.append(
        Row(
            f"12 failover, kill -9 primary in a submit burst -> standby primary, takes a submit "
            f"(failover_timeout_s {FAILOVER_TIMEOUT_S:.1f}, async; {len(fails)} runs)",
            f"{median(times):.2f} s median, {worst:.2f} s max (role primary "
            f"{median([f.role_s for f in fails]):.2f} s; clients' 1st ack "
            f"{median([f.client_s for f in fails]):.2f} s); killed one rejoins, caught up in "
            f"{median([f.rejoin_s for f in fails]):.1f} s; "
            f"{sum(f.lost for f in fails)} of {sum(f.acked_before for f in fails):,} acked "
            f"before the kill lost (async: by design)",
            f"< {TARGET_S:g} s",
            "PASS" if worst < TARGET_S else "FAIL",
            data={"runs": [vars(f) for f in fails]},
        )
    )
    # The same in sync mode: an acknowledged submit is on the standby's disk, none is lost.
    fails = _failovers(plan, sizes, "sync", sizes.sync_rounds)
    lost = sum(f.lost for f in fails)
    rows.append(
        Row(
            f"12 same, replication sync ({len(fails)} runs): acked submits lost",
            f"{lost} of {sum(f.acked_before for f in fails):,}; failover "
            f"{median([f.seconds for f in fails]):.2f} s median, "
            f"{max(f.seconds for f in fails):.2f} s max",
            "0",
            "PASS" if lost == 0 else "FAIL",
            data={"runs": [vars(f) for f in fails]},
        )
    )

    loads: dict[str, list[LoadRun]] = {"solo": [], "async": [], "sync": []}
    for run_no in range(sizes.runs):
        for mode in loads:  # interleaved: drift hits every mode alike
            loads[mode].append(_measure(plan, sizes, mode, run_no))
    rate = {m: median([r.jobs_per_s for r in runs]) for m, runs in loads.items()}
    p50 = {m: median([r.p50_ms for r in runs]) for m, runs in loads.items()}
    asy = _median_run(loads["async"])
    lag = [x for r in loads["async"] for x in r.lag]
    n = sizes.clients
    text = (
        f"{rate['async']:,.0f} submits/s ({spread([r.jobs_per_s for r in loads['async']])})"
        f", p50 {asy.p50_ms:.1f} p99 {asy.p99_ms:.0f} ms; standby lag p50 "
        f"{_pct(lag, 0.5):,.0f} max {max(lag, default=0):,} records; lag 0 "
        f"{median([r.catch_up_s for r in loads['async']]) * 1000:,.0f} ms after the "
        f"load; cpu primary {asy.primary_cpu:.0%} standby {asy.standby_cpu:.0%} "
        f"cli {asy.client_cpu:.0%}"
    )
    kinds: dict[str, int] = {}
    for r in (r for runs in loads.values() for r in runs):
        for kind, times_seen in r.error_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + times_seen
    if kinds:
        top = max(kinds, key=lambda k: kinds[k])
        text += f"; {sum(kinds.values())} errors, e.g. {top}"
    rows.append(
        Row(
            f"12 async replication, {n} clients, 1 standby",
            text,
            data={m: [vars(r) for r in runs] for m, runs in loads.items()},
        )
    )
    cost = rate["async"] / rate["solo"]
    rows.append(
        Row(
            f"12 {n} clients: async + standby / lone controller",
            f"{cost:.1%} ({rate['async']:,.0f} / {rate['solo']:,.0f} submits/s)",
            data={"ratio": cost},
        )
    )
    ratio, lat = rate["sync"] / rate["async"], p50["sync"] / p50["async"]
    degraded = sum(r.degraded for r in loads["sync"])
    rows.append(
        Row(
            f"12 {n} clients: sync / async",
            f"throughput {ratio:.1%} ({rate['sync']:,.0f} / {rate['async']:,.0f} submits/s); "
            f"median latency {lat:.2f}x ({p50['sync']:.1f} / {p50['async']:.1f} ms)"
            + (f"; {degraded} degraded-to-async alerts" if degraded else ""),
            data={"throughput_ratio": ratio, "latency_ratio": lat, "degraded": degraded},
        )
    )
    return rows


if __name__ == "__main__":
    import argparse
    import signal
    import tempfile

    from bench.common import table

    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.add_argument("--full", action="store_true", help="10 failovers, 64 clients")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))  # cleanup
    with tempfile.TemporaryDirectory(prefix="xce-bench-failover-") as tmp:
        print(table(run(Plan.make(not args.full, Path(tmp)))))
    sys.exit(0)
