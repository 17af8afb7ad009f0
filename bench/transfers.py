"""Job files through XCE side by side with `curl` against a static HTTP server, and `cp`.

Sites without shared storage move every input and output through the controller, so its
file routes should run near what the plain tools do on the same machine. For each size
(100 MiB, 1 GiB, 4 GiB; `--quick`: 100 MiB only; `--size MIB` picks others) one run makes
a file and measures, on loopback:

* `cp` of the file (the disk's own pace);
* the baseline: `curl -T` (PUT) to, and `curl -o` from, an aiohttp server in its own
  process (static GET with sendfile; PUT written in 1 MiB pieces): the pace of HTTP with
  nothing else to do;
* XCE: `xce job submit --stage-in` (the CLI streams the file, hashing it as it goes; the submit
  itself is in the time), the worker's fetch of that input (from the job's dispatch to its
  first line, less the same for a job without an input), the worker's return of the file
  as another job's output (that job copies it in locally and syncs it, as the curl PUT's
  source is on disk; from its last line to its finish report, which waits for the outputs;
  the controller's CPU from the moment that line is written, not during the job's copy) and
  `xce job output --file` of that output to a file (a CLI process: Python's start-up is in
  the time).

Each XCE transfer is paired with the curl transfer of the same direction (upload and
output return with the PUT, worker fetch and CLI download with the GET); the ratio is XCE's
time over curl's, medians of the runs. Peak resident memory (VmHWM) is given for both
sides: the client (curl, cp, the CLI: sampled until it exits; the worker) and the server
(the static server or the controller), the daemons' reset through /proc/PID/clear_refs
before each transfer, so a peak that grew with the file would show; and the server's CPU
seconds (a loaded machine inflates wall times more than CPU times). The goal: within 1.5x
of curl at 1 GiB and above, peaks flat.

Every transfer writes its file once, into the page cache. On a virtual machine the first
write into memory the guest has not used lately costs far more than the copy (each page
faults in the hypervisor; 2.4-3.0 s of system time per GiB on the machine of
docs/performance.md, against 0.24 s into memory just freed), and which writer meets such
memory depends on what ran before. So before each timed transfer, curl's and XCE's alike,
the bench writes and deletes a file of twice the transfer's size (`back_memory`; three
times before an upload, whose input the worker then fetches), and after each run it
deletes the copies each side made: both sides then write into memory the guest has just
used, as on a machine without a hypervisor. `--cold` leaves the writing out.

`--without-sha256` runs XCE's processes with streamed SHA-256 made a no-op
(`bench/nosha256/sitecustomize.py`, on their PYTHONPATH; nothing is verified): the
difference from a run without it is what the checks cost.

`python -m bench.transfers [--quick] [--size MIB ...] [--runs N] [--dir DIR] [--cold]
[--without-sha256]`
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import grid, median
from bench.controller import KEYS, TOKEN, Controller, free_port
from xce.auth.tokens import TokenService

WORKER_TOKEN = TokenService.open(KEYS, "xce", "xce-api", 12 * 3600.0, 86400.0).issue(
    "worker", (), ("worker",), "service"
)[0]
MIB = 1 << 20
GOAL = 1.5  # XCE / curl at 1 GiB and above
MARK = "returning"  # the output job writes it when its copy is done
GO = "go"  # and waits for this before it ends


# --- processes and their memory -------------------------------------------------------------


def reset_peak(pid: int) -> None:
    """Start the process's VmHWM again from its current resident size (Linux >= 4.0)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_measured(
    argv: list[str], env: dict[str, str] | None = None, stdout: Any = None, cwd: Path | None = None
) -> tuple[float, int, float]:
    """(seconds, peak resident KiB, CPU seconds) of one command, which must succeed. The
    peak is the process's VmHWM, read until it exits: wait4's maxrss would count the Python
    process it was forked from, before its exec. Sampled every 10 ms: a transfer's buffers
    are held for its whole length, so a peak that grew with the file would show. The CPU is
    the command's user and system time (this process's other children are daemons, not
    waited for meanwhile)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd)
    peak = 0

    def watch() -> None:
        nonlocal peak
        time.sleep(0.02)  # past the exec: before it, the forked copy of this process shows
        while proc.poll() is None:
            try:
                peak = max(peak, peak_kib(proc.pid))
            except OSError:
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return seconds, peak, cpu


class StaticServer:
    """The baseline: aiohttp in its own process, serving `root` (GET, sendfile) and taking
    PUT /up/NAME into it in 1 MiB pieces."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.transfers", "--serve", str(root), str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the static server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def serve(root: Path, port: int) -> None:
    from aiohttp import web

    async def put(request: web.Request) -> web.Response:
        target = root / request.match_info["name"]
        with open(target, "wb") as f:
            async for chunk in request.content.iter_chunked(MIB):
                f.write(chunk)
        return web.Response(status=201)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=1 << 40)
    app.router.add_get("/healthz", health)
    app.router.add_put("/up/{name}", put)
    app.router.add_static("/files", root)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- the XCE side ---------------------------------------------------------------------------


class Cluster:
    """One controller and one worker (1 slot, root jobs), as in bench/launch.py."""

    def __init__(self, root: Path) -> None:
        self.root = root
        extra = (
            "heartbeat_interval_s = 1.0\nschedule_interval_s = 0.05\nallow_root_jobs = true\n"
            "max_job_outputs_mb = 65536\nupload_quota_mb = 65536\n"
        )
        self.ctl = Controller(root / "controller", extra=extra)
        self.ctl.start()
        cfg = root / "worker.toml"
        cfg.write_text(f"""
[cluster]
controllers = ["{self.ctl.url}"]

[worker]
name = "bench-files"
slots = 1
spool_dir = "{root / "spool"}"
jobs_dir = "{root / "jobs"}"
token = "{WORKER_TOKEN}"
heartbeat_interval_s = 1.0
allow_root_jobs = true
min_job_uid = 0
cgroup = "none"
""")
        self.log = (root / "worker.log").open("ab")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "xce", "worker", "-c", str(cfg)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.env = {**os.environ, "XCE_TOKEN": TOKEN, "HOME": str(root)}
        self.env.pop("XCE_CLIENT_CONFIG", None)
        self._wait(
            lambda: any(h["status"] == "online" for h in self.ctl.get("/api/v1/hosts")["hosts"])
        )

    @staticmethod
    def _wait(check: Any, timeout: float = 900, every: float = 0.02) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError("timed out")
            time.sleep(every)

    def returning(self, size: int) -> None:
        """Wait for the output job's mark (its copy is done), back the memory the
        controller will write the file into, and let the job end: its return begins."""
        mark = self.root / MARK
        self._wait(mark.exists, every=0.005)
        mark.unlink()
        back_memory(self.root, 2 * size)
        (self.root / GO).touch()

    def returned(self) -> None:
        (self.root / GO).unlink()

    def drop_files(self, size: int) -> None:
        """Delete this run's copies of the file (the controller's, the jobs'), as the curl
        side deletes its own: each run starts with the same memory free on both sides."""
        trees = (self.root / "controller" / "state" / "files", self.root / "jobs", self.root)
        for tree in trees:
            for path in tree.rglob("*") if tree != self.root else tree.iterdir():
                if path.is_file() and not path.is_symlink() and path.stat().st_size >= size // 2:
                    path.unlink()

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "xce", *args[:2], "--controller", self.ctl.url, *args[2:]]

    def submit(
        self, source: Path | None = None, returned: Path | None = None
    ) -> tuple[str, float, int, float]:
        """(job id, seconds, CLI peak KiB, CLI CPU seconds) of `xce job submit`: staging
        `source` in, or copying `returned` (on this host) into the job's directory and
        staging it out; the job prints the time its last step began."""
        args = ["job", "submit", "--json", "--quiet", "--user", "root"]
        command = ["date", "+%s.%N"]
        if source is not None:
            args += ["--stage-in", f"{source}:in.bin"]
        if returned is not None:
            # The copy is on disk before the clock starts (as the curl PUT's source is),
            # and the bench is told when the return begins (MARK: its CPU window).
            args += ["--stage-out", "out.bin"]
            # It then waits for GO (the bench's `back_memory` for the controller's copy
            # runs meanwhile), and its last line starts the return's clock.
            line = f"cp {returned} out.bin && sync out.bin && touch {MARK}"
            line += f" && while [ ! -e {GO} ]; do sleep 0.01; done && date +%s.%N"
            command = ["sh", "-c", line]
        out = self.root / "submit.json"
        with out.open("wb") as f:
            # from the bench's own directory: a job without inputs runs where it was
            # submitted, and this one writes a copy of the file there
            seconds, peak, cpu = run_measured(
                self.cli(*args, "--", *command), self.env, stdout=f, cwd=self.root
            )
        return json.loads(out.read_text())["job_id"], seconds, peak, cpu

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.ctl.get(f"/api/v1/jobs/{job_id}"))

    def finish(self, job_id: str) -> tuple[float, float]:
        """(fetch, return) seconds of a job: dispatch -> its line, its line -> end. The
        times are the job's own; the state is polled slowly, not to load the controller
        whose CPU is measured meanwhile."""
        self._wait(lambda: self.job(job_id)["state"] in ("DONE", "EXIT"), every=0.25)
        job = self.job(job_id)
        if job["state"] != "DONE" or job.get("output_problems"):
            raise RuntimeError(f"job {job_id}: {job}")
        req = urllib.request.Request(
            f"{self.ctl.url}/api/v1/jobs/{job_id}/files/stdout",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            ran = float(resp.read().decode().split()[0])
        return ran - float(job["start_time"]), float(job["end_time"]) - ran

    def stop(self) -> None:
        self.worker.terminate()
        try:
            self.worker.wait(30)
        except subprocess.TimeoutExpired:
            self.worker.kill()
        self.log.close()
        self.ctl.stop()


# --- one size -------------------------------------------------------------------------------


@dataclass
class Figures:
    """Seconds and peaks (KiB) per operation, one entry per run."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    client: dict[str, list[int]] = field(default_factory=dict)
    server: dict[str, list[int]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # the server's CPU seconds
    client_cpu: dict[str, list[float]] = field(default_factory=dict)
    sha256_s: list[float] = field(default_factory=list)  # hashing the file, one core

    def add(
        self,
        op: str,
        seconds: float,
        client: int,
        server: int,
        cpu: float = 0.0,
        client_cpu: float = 0.0,
    ) -> None:
        self.seconds.setdefault(op, []).append(seconds)
        self.client.setdefault(op, []).append(client)
        self.server.setdefault(op, []).append(server)
        self.cpu.setdefault(op, []).append(cpu)
        self.client_cpu.setdefault(op, []).append(client_cpu)


def make_file(path: Path, size: int) -> None:
    block = os.urandom(MIB)
    with path.open("wb") as f:
        for i in range(size // MIB):
            f.write(i.to_bytes(8, "big") + block[8:])
    os.sync()


def sha256_seconds(path: Path) -> float:
    """CPU seconds of one SHA-256 pass over `path` (already in the page cache), in 1 MiB
    reads: what each XCE end that checks a file spends on it and curl does not."""
    import hashlib

    digest = hashlib.sha256()
    started = time.process_time()
    with path.open("rb", buffering=0) as f:
        while block := f.read(MIB):
            digest.update(block)
    return time.process_time() - started


def back_memory(root: Path, size: int) -> None:
    """Write and delete `size` bytes, so that the next writers find memory the guest has
    just used (see the module's docstring); not timed, done before each side."""
    if WARM.cold:
        return
    scratch = root / ".backing"
    block = bytes(8 * MIB)
    with scratch.open("wb") as f:
        for _ in range(0, size, len(block)):
            f.write(block)
    scratch.unlink()


@dataclass
class Warm:
    cold: bool = False


WARM = Warm()


def measure(root: Path, size: int, runs: int, cluster: Cluster, static: StaticServer) -> Figures:
    figures = Figures()
    source = root / "source.bin"
    make_file(source, size)
    env = {**os.environ}
    ctl = cluster.ctl.proc
    assert ctl is not None
    spid, cpid, wpid = static.proc.pid, ctl.pid, cluster.worker.pid
    try:
        for _ in range(runs):
            copy = root / "copy.bin"
            seconds, peak, _ = run_measured(["cp", str(source), str(copy)])
            copy.unlink()
            figures.add("cp", seconds, peak, 0)
            figures.sha256_s.append(sha256_seconds(source))

            back_memory(root, 2 * size)
            reset_peak(spid)
            used = cpu_s(spid)
            seconds, peak, mine = run_measured(
                ["curl", "-sS", "--fail", "-T", str(source), f"{static.url}/up/up.bin"], env
            )
            figures.add("curl PUT", seconds, peak, peak_kib(spid), cpu_s(spid) - used, mine)
            back_memory(root, 2 * size)
            reset_peak(spid)
            used = cpu_s(spid)
            got = root / "got.bin"
            seconds, peak, mine = run_measured(
                ["curl", "-sS", "--fail", "-o", str(got), f"{static.url}/files/up.bin"], env
            )
            figures.add("curl GET", seconds, peak, peak_kib(spid), cpu_s(spid) - used, mine)
            got.unlink()
            (static.root / "up.bin").unlink()

            back_memory(root, 3 * size)  # the upload, then the worker's fetch
            reset_peak(cpid)
            used = cpu_s(cpid)
            job_id, seconds, peak, mine = cluster.submit(source=source)
            figures.add("upload", seconds, peak, peak_kib(cpid), cpu_s(cpid) - used, mine)
            reset_peak(cpid)
            reset_peak(wpid)
            used, worker = cpu_s(cpid), cpu_s(wpid)
            fetch, _ = cluster.finish(job_id)
            figures.add(
                "worker fetch",
                fetch,
                peak_kib(wpid),
                peak_kib(cpid),
                cpu_s(cpid) - used,
                cpu_s(wpid) - worker,
            )
            job_id, _, _, _ = cluster.submit(returned=source)
            cluster.returning(size)  # the job's own copy is not the controller's work
            reset_peak(cpid)
            reset_peak(wpid)
            used, worker = cpu_s(cpid), cpu_s(wpid)
            _, back = cluster.finish(job_id)
            cluster.returned()
            figures.add(
                "output return",
                back,
                peak_kib(wpid),
                peak_kib(cpid),
                cpu_s(cpid) - used,
                cpu_s(wpid) - worker,
            )
            back_memory(root, 2 * size)
            reset_peak(cpid)
            used = cpu_s(cpid)
            with got.open("wb") as f:
                seconds, peak, mine = run_measured(
                    cluster.cli("job", "output", job_id, "--file", "out.bin", "--quiet"),
                    cluster.env,
                    stdout=f,
                )
            figures.add("CLI download", seconds, peak, peak_kib(cpid), cpu_s(cpid) - used, mine)
            if got.stat().st_size != size:
                raise RuntimeError(f"downloaded {got.stat().st_size} of {size} bytes")
            got.unlink()
            cluster.drop_files(size)
    finally:
        source.unlink(missing_ok=True)
    return figures


def launch_overhead(cluster: Cluster, runs: int) -> tuple[float, float]:
    """Dispatch to first line (and last line to end) of a job with no files: subtracted."""
    starts: list[float] = []
    ends: list[float] = []
    for _ in range(runs):
        job_id, _, _, _ = cluster.submit()
        start, end = cluster.finish(job_id)
        starts.append(start)
        ends.append(end)
    return median(starts), median(ends)


PAIRS = (
    ("upload", "curl PUT"),
    ("worker fetch", "curl GET"),
    ("output return", "curl PUT"),
    ("CLI download", "curl GET"),
)


def _mib(kib: list[int]) -> str:
    most = max(kib, default=0)
    return f"{most / 1024:,.0f}" if most else "-"


def report(results: dict[int, Figures], overhead: tuple[float, float]) -> str:
    head = (
        "size",
        "operation",
        "XCE s",
        "MiB/s",
        "curl s",
        "XCE/curl",
        "server CPU s XCE/curl",
        "client CPU s XCE/curl",
        "XCE peak MiB c/s",
        "curl peak MiB c/s",
    )
    rows: list[tuple[str, ...]] = []
    for size, f in results.items():
        label = f"{size // MIB:,} MiB" if size < 1 << 30 else f"{size / (1 << 30):g} GiB"
        cp = median(f.seconds["cp"])
        rows.append(
            (
                label,
                "cp",
                f"{cp:.2f}",
                f"{size / MIB / cp:,.0f}",
                "",
                "",
                "",
                "",
                f"{_mib(f.client['cp'])} / -",
                "",
            )
        )
        rows.append((label, "sha256 (CPU)", f"{median(f.sha256_s):.2f}", *([""] * 7)))
        for op, base in PAIRS:
            secs = f.seconds[op]
            if op == "worker fetch":
                secs = [max(1e-6, s - overhead[0]) for s in secs]
            elif op == "output return":
                secs = [max(1e-6, s - overhead[1]) for s in secs]
            mine, theirs = median(secs), median(f.seconds[base])
            rows.append(
                (
                    label,
                    op,
                    f"{mine:.2f}",
                    f"{size / MIB / mine:,.0f}",
                    f"{theirs:.2f}",
                    f"{mine / theirs:.2f}x",
                    f"{median(f.cpu[op]):.2f} / {median(f.cpu[base]):.2f}",
                    f"{median(f.client_cpu[op]):.2f} / {median(f.client_cpu[base]):.2f}",
                    f"{_mib(f.client[op])} / {_mib(f.server[op])}",
                    f"{_mib(f.client[base])} / {_mib(f.server[base])}",
                )
            )
    return grid([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.transfers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="100 MiB only")
    parser.add_argument("--size", type=int, action="append", help="a size in MiB (repeatable)")
    parser.add_argument("--runs", type=int, help="runs per size (default 3, 1 from 4 GiB)")
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temp dir)")
    parser.add_argument(
        "--cold", action="store_true", help="no write-and-delete of memory before each transfer"
    )
    parser.add_argument(
        "--without-sha256",
        action="store_true",
        help="what the checks cost: XCE's processes run with streamed SHA-256 made a no-op "
        "(bench/nosha256; nothing is verified)",
    )
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    WARM.cold = args.cold
    if args.without_sha256:
        unhashed = str(Path(__file__).resolve().parent / "nosha256")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [unhashed, *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    if args.serve:
        serve(Path(args.serve[0]), int(args.serve[1]))
        return 0
    sizes = [s * MIB for s in args.size] if args.size else [100 * MIB]
    if not args.size and not args.quick:
        sizes += [1 << 30, 4 << 30]
    root = Path(tempfile.mkdtemp(prefix="xce-bench-transfers-", dir=args.dir))
    os.chmod(root, 0o711)
    results: dict[int, Figures] = {}
    cluster = static = None
    try:
        (root / "static").mkdir()
        static = StaticServer(root / "static")
        cluster = Cluster(root / "xce")
        overhead = launch_overhead(cluster, 3)
        for size in sizes:
            runs = args.runs or (1 if size >= 4 << 30 else 3)
            results[size] = measure(root, size, runs, cluster, static)
            print(f"... {size // MIB} MiB done", file=sys.stderr, flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        if static is not None:
            static.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(report(results, overhead))
    print(
        f"\nworker fetch and output return less a job's own dispatch-to-start "
        f"({overhead[0]:.2f} s) and end-to-report ({overhead[1]:.2f} s) without files; "
        "server CPU: the controller's or the static server's; client CPU: the CLI's, the "
        "worker's or curl's; sha256 (CPU): one pass of hashing the file, which each XCE "
        "end of a transfer makes and curl's do not; "
        "peaks: client / server resident MiB; "
        f"goal: XCE/curl <= {GOAL} at 1 GiB and above"
        + (
            "; --without-sha256: XCE's streamed SHA-256 was a no-op at both ends "
            "(nothing verified), the sha256 row is still one real pass"
            if args.without_sha256
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
