"""Accounting figures: `python -m bench.acct [--records N] [--jobs N] [--dir DIR]`.

1. Insert cost: submit + start + finish of N jobs through `ControllerService.commit` on a
   real `DurableLog` (WAL on disk, fsync `always`), with and without the accounting feed
   (the feed's writer thread running, and drained before the clock stops). This is the
   controller's own path without HTTP, so the overhead is measured against the smallest
   denominator the request path has.
2. A store of 1M records (1,000 users, 20 queues, 200 hosts, a year of end times): the
   insert rate of the writer's batches, disk bytes per record, and the two queries the
   issue names: one user's records over one month (`xce acct -u USER -S 30d`) and a
   summary by user over a year (`xce report -S 365d`), each on a fresh read-only connection
   as the API opens it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from xce.accounting import store
from xce.accounting.feed import AccountingFeed
from xce.accounting.record import AcctRecord
from xce.config.settings import ControllerSettings
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord, Usage
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore

DAY = 86400.0


async def _throughput(root: Path, jobs: int, accounting: bool) -> tuple[float, float]:
    """Jobs per second through submit, start and finish commits (one job at a time), and
    the process's CPU time per job (every thread: the loop, the WAL's, the store's)."""
    state_dir = root / ("with" if accounting else "without")
    state_dir.mkdir(mode=0o700)
    log = DurableLog.open(state_dir, StoreSettings(segment_bytes=64 << 20))
    settings = ControllerSettings(state_dir=state_dir)
    service = ControllerService(
        settings,
        FileStore(state_dir / "files", 1 << 20, 1 << 20, 3600.0),
        state=log.recovered.state,
        log=log,
    )
    feed = None
    if accounting:
        feed = AccountingFeed(state_dir)
        feed.start()
        service.accounting = feed
    await service.commit(
        [
            ev.QueueCreated(0.0, QueueRecord("normal")),
            ev.HostRegistered(0.0, "w1", 1 << 20, 1 << 30),
        ]
    )
    spec = JobSpec("alice", "normal", command="true", slots=1, memory_mb=100)
    usage = Usage(1.0, 0.1, 50 << 20, 1.2)
    started = time.perf_counter()
    cpu = time.process_time()
    for n in range(1, jobs + 1):
        now = time.time()
        await service.commit([ev.JobSubmitted(now, n, spec)])
        await service.commit([ev.JobStarted(now, str(n), "w1")])
        await service.commit([ev.JobFinished(now, str(n), 0, 0, None, usage)])
    if feed is not None:
        assert feed.flush(60.0)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if feed is not None:
        feed.close()
    await log.writer.close()
    return jobs / elapsed, cpu / jobs


def _records(n: int, now: float, seed: int = 7) -> list[AcctRecord]:
    rng = random.Random(seed)
    out = []
    ends = sorted(now - rng.random() * 365 * DAY for _ in range(n))  # as they arrive
    for i in range(n):
        end = ends[i]
        wall = rng.random() * 7200
        slots = rng.choice((1, 1, 2, 4, 8, 16))
        cpu = wall * slots * rng.random()
        start = end - wall
        submit = start - rng.random() * 600
        user = f"user{rng.randrange(1000):04d}"
        out.append(
            AcctRecord(
                job_id=str(i + 1),
                attempt=0,
                number=i + 1,
                array_index=None,
                name=f"job{i % 97}",
                user=user,
                grp=f"g{hash(user) % 30}",
                queue=f"q{rng.randrange(20)}",
                submit_time=submit,
                start_time=start,
                end_time=end,
                wait_s=start - submit,
                host=f"h{rng.randrange(200):03d}",
                hosts=f"h{rng.randrange(200):03d}:{slots}",
                req_slots=slots,
                req_memory_mb=4096,
                req_walltime_s=7200,
                req_gpus=0,
                resources="",
                state="DONE" if rng.random() < 0.9 else "EXIT",
                exit_code=0,
                exit_signal=None,
                reason="",
                cpu_user_s=cpu * 0.9,
                cpu_system_s=cpu * 0.1,
                max_rss_bytes=rng.randrange(1 << 32),
                wall_s=wall,
                cpu_eff=cpu / (slots * wall) if wall else None,
                mem_eff=rng.random(),
                seq=i + 1,
            )
        )
    return out


def _timed(fn, runs: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cli_rows(db: Path, n: int, who: str) -> list[tuple[str, str]]:
    """The same two questions end to end: a real controller process serving the store,
    `xce acct` / `xce report` as a user types them (process start-up included)."""
    import os
    import shutil
    import subprocess
    import sys

    from tests.integration.cluster import ADMIN_TOKEN, Cluster

    cluster = Cluster(db.parent.parent / "cluster")
    target = cluster.root / "controller" / "accounting"
    target.mkdir(parents=True, mode=0o700)
    (cluster.root / "controller").chmod(0o700)
    shutil.move(str(db), target / "acct.db")
    cluster.start_controller()
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(cluster.root)}
    out = []
    try:
        import urllib.parse

        for label, path in (
            (
                f"API `GET /api/v1/accounting/jobs?user=USER&since=30d`, {n:,} records, "
                "HTTP round trip",
                "/api/v1/accounting/jobs?" + urllib.parse.urlencode({"user": who, "since": "30d"}),
            ),
            (
                f"API `GET /api/v1/accounting/summary?by=user&since=365d`, {n:,} records",
                "/api/v1/accounting/summary?by=user&since=365d",
            ),
        ):
            times = []
            for _ in range(5):
                t = time.perf_counter()
                cluster.get(path)
                times.append(time.perf_counter() - t)
            out.append((label, f"{1000 * statistics.median(times):,.0f} ms"))
        for label, argv in (
            (
                f"`xce acct -u USER -S 30d --json`, {n:,} records, real controller, CLI wall time",
                ["acct", "-u", who, "-S", "30d", "--json"],
            ),
            (
                f"`xce report --by user -S 365d`, {n:,} records, CLI wall time",
                ["report", "--by", "user", "-S", "365d"],
            ),
            ("`xce --help` (the CLI's own start-up, for comparison)", ["--help"]),
        ):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "xce",
                        *argv,
                        *(["--controller", cluster.url] if argv[0] != "--help" else []),
                    ],
                    capture_output=True,
                    env=env,
                    check=True,
                )
                times.append(time.perf_counter() - t)
                assert done.stdout
            out.append((label, f"{1000 * statistics.median(times):,.0f} ms"))
    finally:
        cluster.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.acct", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="xce-bench-acct-", dir=args.dir))
    rows: list[tuple[str, str]] = []

    without, with_ = [], []
    for run in range(args.runs):  # interleaved, in turn first, so drift hits both alike
        run_dir = root / f"run{run}"
        run_dir.mkdir()
        for accounting in (False, True) if run % 2 == 0 else (True, False):
            found = asyncio.run(_throughput(run_dir, args.jobs, accounting))
            (with_ if accounting else without).append(found)
    a, b = (statistics.median(r for r, _ in x) for x in (without, with_))
    ca, cb = (statistics.median(c for _, c in x) for x in (without, with_))
    rows.append(
        (
            f"submit+start+finish through commit, {args.jobs} jobs, fsync always: "
            f"without / with accounting (median of {args.runs} interleaved runs)",
            f"{a:,.0f} / {b:,.0f} jobs/s ({100 * (b - a) / a:+.1f} %)",
        )
    )
    rows.append(
        (
            "same: process CPU per job (all threads), without / with",
            f"{1e6 * ca:,.0f} / {1e6 * cb:,.0f} us ({100 * (cb - ca) / ca:+.1f} %)",
        )
    )

    now = time.time()
    records = _records(args.records, now)
    path = root / "big" / "acct.db"
    conn = store.connect(path)
    t = time.perf_counter()
    for i in range(0, len(records), 10_000):
        store.insert(conn, records[i : i + 10_000], i + 10_000)
    insert_s = time.perf_counter() - t
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = sum(p.stat().st_size for p in path.parent.iterdir())
    rows.append(
        (
            f"store: insert {args.records:,} records in batches of 10,000",
            f"{args.records / insert_s:,.0f} records/s",
        )
    )
    rows.append(("store: disk per record (4 indexes, rollups)", f"{size / args.records:,.0f} B"))

    who = records[-1].user  # a user with a record in the last month at any size

    def one_user_month() -> None:
        c = store.connect(path, readonly=True)
        found, _ = store.list_attempts(
            c, {"user": [who], "since": now - 30 * DAY}, None, 100_000, None
        )
        c.close()
        assert found

    def summary_year() -> None:
        c = store.connect(path, readonly=True)
        found = store.summary(c, "user", {"since": now - 365 * DAY}, None)
        c.close()
        assert found

    def restricted_user_month() -> None:  # a plain user: visibility computed on the owners
        c = store.connect(path, readonly=True)
        users = [u for u in store.owners(c) if u == who]
        store.list_attempts(c, {"since": now - 30 * DAY}, users, 100_000, None)
        c.close()

    rows.append(
        (
            f"query: one user, one month, of {args.records:,} (`xce acct -u -S 30d`)",
            f"{1000 * _timed(one_user_month):,.1f} ms",
        )
    )
    rows.append(
        (
            "same, asked by that user (visibility: owners filtered)",
            f"{1000 * _timed(restricted_user_month):,.1f} ms",
        )
    )
    rows.append(
        (
            f"query: summary by user over a year, {args.records:,} records (`xce report -S 365d`)",
            f"{1000 * _timed(summary_year, 3):,.0f} ms",
        )
    )
    rows += _cli_rows(path, args.records, who)
    print("| figure | measured |\n| --- | --- |")
    for figure, measured in rows:
        print(f"| {figure} | {measured} |")
    import shutil

    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
