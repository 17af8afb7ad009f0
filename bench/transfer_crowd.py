"""Many hosts fetching one large file at once, and the API answering meanwhile.

Sites without shared storage move every input through the controller, so an array of 100
tasks that start together fetches its input 100 times, once per host. The controller moves
at most `[controller] max_concurrent_transfers` file bodies at once; a request for another
waits for a slot up to `transfer_wait_s` and is then answered 503 `busy` with Retry-After,
and nothing but file bodies ever waits for a slot. This bench shows what that buys: a real
controller on loopback serves one job's file to N `curl` processes at once, each from a
loopback address of its own (as hosts would come, under the guard's per-address limit) and
each asking again after a busy answer's Retry-After (as XCE's clients do), while a probe
asks `GET /api/v1/jobs?limit=1` every 50 ms and submits a job every second, first with
no transfer running, then in the crowd. The fetchers stand for other machines: here they
run at nice 19 (`--nice`), so that they take the CPU the controller and the probe leave, as
hosts would spend their own; `--nice 0` runs them as the controller's equals, and a hundred
processes busy on two cores then delay every other process on the machine.

Printed: the probe's answers and latency (p50, p99, max) in each phase; the bytes the
controller sent in the crowd and its rate; the busy answers; the fetches that ended whole;
the controller's CPU and its peak resident memory. The machine is shared by the controller,
the crowd and the probe, so the crowd phase measures the API under the CPU the transfers
leave it.

`python -m bench.transfer_crowd [--fetchers 100] [--size MIB] [--seconds S] [--nice N]
[--dir DIR]`
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import grid, median
from bench.controller import TOKEN
from bench.load import _LABEL, _histogram_p99
from bench.transfers import MIB, Cluster, cpu_s, make_file, peak_kib, reset_peak

PROBE_EVERY_S = 0.05
# Each fetcher: the file to nowhere, a busy answer asked again after its Retry-After.
_CURL = ("curl", "-sS", "--fail", "--retry", "1000", "-o", "/dev/null")
SUBMIT_EVERY = 20  # one probe in this many is a submit
_SENT = re.compile(r'^xce_file_sent_bytes_total\{kind="output"\} (\S+)$', re.M)
_BUSY = re.compile(
    r'^xce_api_request_seconds_count\{[^}]*route="[^"]*/files/[^"]*"'
    r'[^}]*status="503"[^}]*\} (\S+)$',
    re.M,
)


@dataclass
class Probe:
    """Latencies (s) of the probe's requests, per phase, and the failures."""

    phase: str = "idle"
    seconds: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, url: str) -> None:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        submit = json.dumps({"command": "true", "user": "root"}).encode()
        n = 0
        while not self.stop.is_set():
            phase = self.phase
            started = time.perf_counter()
            try:
                if n % SUBMIT_EVERY == 0:
                    conn.request("POST", "/api/v1/jobs", body=submit, headers=headers)
                else:
                    conn.request("GET", "/api/v1/jobs?limit=1", headers=headers)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status < 300
            except (OSError, http.client.HTTPException):
                conn.close()
                ok = False
            took = time.perf_counter() - started
            if ok:
                self.seconds.setdefault(phase, []).append(took)
            else:
                self.failures[phase] = self.failures.get(phase, 0) + 1
            n += 1
            self.stop.wait(max(0.0, PROBE_EVERY_S - took))
        conn.close()


def _metrics(url: str) -> str:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def _sent(text: str) -> float:
    """Bytes of job files the controller has sent as downloads so far."""
    m = _SENT.search(text)
    return float(m.group(1)) if m else 0.0


def _busy(text: str) -> int:
    """Job-file requests the controller has answered 503 so far."""
    return sum(int(float(m.group(1))) for m in _BUSY.finditer(text))


def _listing_buckets(text: str) -> dict[float, float]:
    """The controller's own latency histogram of `GET /api/v1/jobs` answered 200:
    cumulative count per bucket bound (its time from request to answer, not the probe's)."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("xce_api_request_seconds_bucket{"):
            labels = dict(_LABEL.findall(line))
            if (labels["method"], labels["route"], labels["status"]) == (
                "GET",
                "/api/v1/jobs",
                "200",
            ):
                buckets[float(labels["le"])] = float(line.rsplit(" ", 1)[1])
    return buckets


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _staged_file(cluster: Cluster, source: Path) -> str:
    """The job whose output is `source` (staged in, returned as its output): its id."""
    out = subprocess.run(
        cluster.cli(
            "job", "submit", "--json", "--quiet", "--user", "root",
            "--stage-in", f"{source}:big.bin", "--stage-out", "big.bin", "--", "true",
        ),
        env=cluster.env, capture_output=True, check=True, cwd=cluster.root,
    )  # fmt: skip
    job_id = str(json.loads(out.stdout)["job_id"])
    cluster._wait(lambda: cluster.job(job_id)["state"] in ("DONE", "EXIT"), every=0.25)
    job = cluster.job(job_id)
    if job["state"] != "DONE" or job.get("output_problems"):
        raise RuntimeError(f"job {job_id}: {job}")
    return job_id


def crowd(root: Path, fetchers: int, size: int, seconds: float, nice: int = 19) -> str:
    cluster = Cluster(root / "xce")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        source = root / "big.bin"
        make_file(source, size)
        job_id = _staged_file(cluster, source)
        source.unlink()
        url = f"{cluster.ctl.url}/api/v1/jobs/{job_id}/files/big.bin"
        ctl = cluster.ctl.proc
        assert ctl is not None
        probe = Probe()
        prober = threading.Thread(target=probe.run, args=(cluster.ctl.url,), daemon=True)
        marks = [_metrics(cluster.ctl.url)]
        prober.start()
        time.sleep(seconds / 2)

        log = root / "curl.log"
        before, cpu = _metrics(cluster.ctl.url), cpu_s(ctl.pid)
        marks.append(before)
        reset_peak(ctl.pid)
        probe.phase = "crowd"
        started = time.monotonic()
        auth = f"Authorization: Bearer {TOKEN}"
        with log.open("wb") as err:
            for i in range(fetchers):
                address = f"127.1.{i // 250}.{i % 250 + 1}"
                procs.append(
                    subprocess.Popen(
                        ["nice", "-n", str(nice), *_CURL, "--interface", address, "-H", auth, url],
                        stdout=err,
                        stderr=err,
                    )
                )
            time.sleep(seconds)
        elapsed = time.monotonic() - started
        after, used = _metrics(cluster.ctl.url), cpu_s(ctl.pid) - cpu
        moved, busy = _sent(after) - _sent(before), _busy(after) - _busy(before)
        marks.append(after)
        peak = peak_kib(ctl.pid)
        probe.stop.set()
        prober.join()
        whole = sum(1 for p in procs if p.poll() == 0)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cluster.stop()

    head = ("phase", "answers", "failed", "p50 ms", "p99 ms", "max ms", "controller p99 ms")
    rows = [head]
    for i, phase in enumerate(("idle", "crowd")):
        got = probe.seconds.get(phase, [])
        _, inside = _histogram_p99(_listing_buckets(marks[i]), _listing_buckets(marks[i + 1]))
        rows.append(
            (
                phase,
                f"{len(got):,}",
                f"{probe.failures.get(phase, 0)}",
                f"{median(got) * 1000:.1f}" if got else "-",
                f"{_quantile(got, 0.99) * 1000:.1f}",
                f"{max(got, default=0.0) * 1000:.1f}",
                f"<= {inside * 1000:g}",
            )
        )
    return grid(rows) + (
        f"\n\n{fetchers} fetchers (nice {nice}) of a {size // MIB:,} MiB file for "
        f"{elapsed:.0f} s: the "
        f"controller sent {moved / MIB:,.0f} MiB ({moved / MIB / elapsed:,.0f} MiB/s), "
        f"{whole} fetches ended whole, {busy} busy answers were retried; controller "
        f"CPU {used / elapsed * 100:.0f} % of a core, peak {peak / 1024:,.0f} MiB resident. "
        f"The probe: GET /api/v1/jobs?limit=1 every {PROBE_EVERY_S * 1000:.0f} ms, one in "
        f"{SUBMIT_EVERY} a submit; controller p99: the bucket of the controller's own "
        "latency histogram (request to answer) under which 99 % of the listings were answered."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.transfer_crowd", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--fetchers", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024, help="the file's size in MiB")
    parser.add_argument("--seconds", type=float, default=30.0, help="the crowd's length")
    parser.add_argument(
        "--nice",
        type=int,
        default=19,
        help="the fetchers' nice level (0: equals of the controller)",
    )
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temp dir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="xce-bench-crowd-", dir=args.dir))
    os.chmod(root, 0o711)
    try:
        print(crowd(root, args.fetchers, args.size * MIB, args.seconds, args.nice))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
