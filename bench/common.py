"""Shared pieces: the run plan (quick or full), table rows, statistics and formatting."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce.core import events as ev
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState


@dataclass(frozen=True)
class Plan:
    """How big and how long: `quick` shrinks job counts and run times."""

    quick: bool
    root: Path  # the bench's temp dir: every file it writes lives under it
    repeats: int  # runs per cheap timing (medians are reported)
    heavy_repeats: int  # runs per expensive timing (1M-job checkpoint / recovery)
    fsync_seconds: float
    http_runs: int  # controller runs per configuration
    http_warmup: float
    http_seconds: float
    wal_seconds: float
    checkpoint_sizes: tuple[int, ...]
    big: int  # the size the 1M targets are about (20k in quick mode)
    recovery_wal_events: int
    memory_jobs: int
    memory_runs: int

    @classmethod
    def make(cls, quick: bool, root: Path) -> Plan:
        if quick:
            return cls(
                True,
                root,
                repeats=3,
                heavy_repeats=3,
                fsync_seconds=0.5,
                http_runs=2,
                http_warmup=0.3,
                http_seconds=1.5,
                wal_seconds=0.7,
                checkpoint_sizes=(20_000,),
                big=20_000,
                recovery_wal_events=2_000,
                memory_jobs=20_000,
                memory_runs=2,
            )
        return cls(
            False,
            root,
            repeats=5,
            heavy_repeats=2,
            fsync_seconds=2.0,
            http_runs=3,
            http_warmup=1.0,
            http_seconds=5.0,
            wal_seconds=3.0,
            checkpoint_sizes=(100_000, 1_000_000),
            big=1_000_000,
            recovery_wal_events=10_000,
            memory_jobs=200_000,
            memory_runs=3,
        )

    @property
    def full_big(self) -> int:
        return 1_000_000


@dataclass
class Row:
    figure: str
    measured: str
    target: str = "-"
    verdict: str = "info"
    data: dict[str, Any] = field(default_factory=dict)


# --- statistics and formatting --------------------------------------------------------------


def stop_process(proc: subprocess.Popen[Any] | None, grace_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s`: a server under test
    stops cleanly where it can, and a hung one never holds the bench."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float]) -> str:
    """`min..max` of the runs, for the reader to judge the noise."""
    if len(values) < 2:
        return ""
    return f"{min(values):,.0f}..{max(values):,.0f}"


def verdict(ok: bool, extrapolated: bool = False) -> str:
    word = "PASS" if ok else "FAIL"
    return word + "*" if extrapolated else word


def count(n: int) -> str:
    """1000000 -> 1M, 100000 -> 100k, 20000 -> 20k."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def size(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def table(rows: list[Row]) -> str:
    head = ("figure", "measured", "target", "verdict")
    return grid([head, *((r.figure, r.measured, r.target, r.verdict) for r in rows)])


def grid(cells: Sequence[Sequence[str]]) -> str:
    """Rows of cells as aligned text, the first row the heading, ruled below it."""
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = []
    for i, c in enumerate(cells):
        lines.append(" | ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


# --- another source tree, for before/after runs -------------------------------------------

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def source_tree(rev: str, parent: Path) -> Iterator[tuple[Path, str]]:
    """The `xce` package (and the `bench` helpers beside it) of commit `rev` unpacked into a
    temp dir under `parent`, and the full commit id. `git archive` rather than a `git
    worktree`: nothing is registered in the repository, and the dir is a plain folder that
    `rmtree` removes whatever happens."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.strip()
    tree = Path(tempfile.mkdtemp(prefix=f"xce-tree-{commit[:10]}-", dir=parent))
    try:
        archive = subprocess.Popen(
            ["git", "archive", "--format=tar", commit, "xce", "bench"],
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {commit} failed")
        yield tree, commit
    finally:
        shutil.rmtree(tree, ignore_errors=True)


# --- building state -------------------------------------------------------------------------

QUEUE = "normal"
_TEMPLATE = "true bench 127.0.0.1 "


def spec(fresh: bool = True) -> JobSpec:
    """The spec an API submit of {"command": "true", "user": "bench"} produces.

    With `fresh`, user, command and submit host are new string objects for every job, as
    they are when each request's JSON is decoded (the queue name is the shared default).
    """
    if not fresh:
        return JobSpec(user="bench", queue=QUEUE, command="true", submit_host="127.0.0.1")
    t = _TEMPLATE
    return JobSpec(user=t[5:10], queue=QUEUE, command=t[0:4], submit_host=t[11:20])


def queue_event() -> ev.QueueCreated:
    return ev.QueueCreated(time.time(), QueueRecord(QUEUE, priority=30))


def submitted(number: int, at: float | None = None) -> ev.JobSubmitted:
    return ev.JobSubmitted(time.time() if at is None else at, number, spec())


def build_state(n: int) -> ClusterState:
    """QueueCreated + n JobSubmitted applied directly (no WAL): n pending jobs, seq n + 1."""
    state = ClusterState()
    state.apply(queue_event())
    at = time.time()
    apply = state.apply
    for number in range(1, n + 1):
        apply(ev.JobSubmitted(at, number, spec()))
    state.applied = n + 1
    return state


# --- event-loop responsiveness --------------------------------------------------------------


class Ticker:
    """Sleeps 1 ms in a loop and records the gaps: the longest one is the loop's pause."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._stop = False

    async def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    async def __aenter__(self) -> Ticker:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0.05)  # let it settle into its rhythm
        self.gaps.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.01)  # catch the gap that ends when the awaited work finishes
        self._stop = True
        assert self._task is not None
        await self._task

    @property
    def max_ms(self) -> float:
        return max(self.gaps, default=0.0) * 1000

    def percentile_ms(self, q: float) -> float:
        if not self.gaps:
            return 0.0
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000
