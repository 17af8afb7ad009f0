"""XCE's REST submit against slurmrestd's, side by side on one machine.

`python -m bench.slurmrest [--runs 5] [--clients 1,8,64] [--fsync interval,always]`

Each run starts a fresh one-node Slurm in a temp dir made at run time (its own munged with a
generated key and socket, slurmctld and slurmd on their own loopback ports, SlurmUser=root,
state and spool under the temp dir, the node's line from `slurmd -C`) and slurmrestd on a
127.0.0.1 port, dropped to `nobody` (it refuses to run as root). Clients authenticate with
`rest_auth/jwt`: slurmctld has `AuthAltTypes=auth/jwt` with a generated HS256 key and the
token comes from `scontrol token`. The partition is configured `State=DOWN`, so Slurm accepts
and queues every job but starts none (the XCE side has no worker: its jobs stay pending too);
what is timed on both sides is the acknowledgement of a submission.

The load is `bench.controller.drive` for both: N aiohttp keep-alive sessions, one request in
flight each, POSTing the same small JSON job in a loop (Slurm: `POST
/slurm/v0.0.38/job/submit`, answered 200 with the job id; XCE: `POST /api/v1/jobs`, 201) for a
fixed window after a warm-up; afterwards each side's queue is checked to hold at least every
acknowledged job. Runs alternate ABBA per client count (Slurm, XCE, XCE, Slurm, ...), a fresh
server each run. It prints the median rate and p99 per side and the ratios, with the server
side's CPU per acknowledged submit (Slurm: slurmctld + slurmrestd + munged; XCE: the
controller process).

Durability differs by design and the table says which mode each XCE figure used: slurmctld
acknowledges a submit before its state is saved (its state-save thread writes and fsyncs the
job state files later, batched), which matches XCE's `wal_fsync = "interval"`; under
`"always"` XCE acknowledges only after the submit's WAL group is fdatasync'd.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psutil

from bench.common import Plan, grid, median, spread, stop_process
from bench.controller import Load, Target, drive, free_port, measure

API = "v0.0.38"  # the newest OpenAPI plugin Slurm 22.05 ships (openapi/v0.0.36-38)
USER = "nobody"  # slurmrestd's user, and the jobs' owner
BODY = json.dumps(
    {
        "job": {
            "name": "bench",
            "partition": "normal",
            "current_working_directory": "/tmp",
            "environment": {"PATH": "/usr/bin:/bin"},
        },
        "script": "#!/bin/sh\ntrue\n",
    }
).encode()
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol")


def missing() -> list[str]:
    """The Slurm and MUNGE programs this bench needs that are not on PATH (or /usr/sbin)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [name for name in DAEMONS if shutil.which(name, path=path) is None]


def _which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise RuntimeError(f"{name} not found: apt-get install slurmctld slurmd slurmrestd munge")
    return found


class SlurmCluster:
    """A one-node Slurm with slurmrestd, all under `root`; `stop()` leaves no process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.token = ""

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.root / f"{name}.out").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env or self.env
            )

    def _wait(self, what: str, ready: object, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.logs()}")
            if callable(ready) and ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{what} not ready after {timeout:g} s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log"))
        )

    def _scontrol(self, *args: str) -> str:
        out = subprocess.run(
            [_which("scontrol"), *args], env=self.env, capture_output=True, text=True, timeout=30
        )
        return out.stdout if out.returncode == 0 else ""

    def start(self) -> None:
        root = self.root
        # slurmrestd runs as `nobody` and reads slurm.conf; munged's socket must be reachable.
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        root.chmod(0o711)
        for sub, mode in (("munge", 0o700), ("msock", 0o755), ("state", 0o700), ("spool", 0o700)):
            (root / sub).mkdir(mode=mode)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        jwt = root / "state" / "jwt_hs256.key"
        jwt.write_bytes(os.urandom(32))
        jwt.chmod(0o600)
        sock = root / "msock" / "munge.socket"
        self._spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--log-file={root / 'munge' / 'munged.log'}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait("munged", sock.exists)
        node = subprocess.run(
            [_which("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.splitlines()[0]  # this host's real CPUs, sockets, cores, memory
        host = socket.gethostname()
        ctld, slurmd_port = free_port(), free_port()
        self.conf.write_text(
            f"""ClusterName=xcebench
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={jwt}
CredType=cred/munge
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "slurmctld.log"}
SlurmdLogFile={root / "slurmd.log"}
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MaxJobCount=1000000
MinJobAge=3600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
{node} NodeHostname={host} NodeAddr=127.0.0.1
PartitionName=normal Nodes={host} Default=YES MaxTime=INFINITE State=DOWN
"""
        )
        self.conf.chmod(0o644)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: "UP" in self._scontrol("ping"))
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf)])
        self._wait("slurmd", lambda: "State=IDLE" in self._scontrol("show", "node", host))
        token = self._scontrol("token", f"username={USER}", "lifespan=7200").strip()
        if not token.startswith("SLURM_JWT="):
            raise RuntimeError(f"scontrol token failed:\n{self.logs()}")
        self.token = token.split("=", 1)[1]
        # SLURM_JWT=daemon: slurmrestd speaks auth/jwt to slurmctld, with each client's token.
        self._spawn(
            "slurmrestd",
            [
                _which("slurmrestd"),
                "-f",
                str(self.conf),
                "-u",
                USER,
                "-a",
                "rest_auth/jwt",
                "-s",
                f"openapi/{API}",
                f"127.0.0.1:{self.port}",
            ],
            env={**self.env, "SLURM_JWT": "daemon"},
        )
        self._wait("slurmrestd", self._answers)
        status, payload = self._submit_one()
        if status != 200 or payload.get("errors") or not payload.get("job_id"):
            raise RuntimeError(f"a trial submit failed: {status} {payload}\n{self.logs()}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    @property
    def headers(self) -> dict[str, str]:
        return {
            "X-SLURM-USER-NAME": USER,
            "X-SLURM-USER-TOKEN": self.token,
            "Content-Type": "application/json",
        }

    def _submit_one(self) -> tuple[int, dict[str, object]]:
        req = urllib.request.Request(
            f"{self.url}/slurm/{API}/job/submit", data=BODY, headers=self.headers
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())

    def target(self) -> Target:
        pids = tuple(self.procs[n].pid for n in ("slurmctld", "slurmrestd", "munged"))
        return Target(f"{self.url}/slurm/{API}/job/submit", self.headers, BODY, 200, pids)

    def queued(self) -> int:
        """Jobs slurmctld holds (every one pending: the partition is down)."""
        out = subprocess.run(
            [_which("squeue"), "-h", "-t", "all", "-o", "%i"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return len(out.stdout.split())

    def stop(self) -> None:
        for name in ("slurmrestd", "slurmd", "slurmctld", "munged"):
            stop_process(self.procs.pop(name, None))

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def measure_slurm(plan: Plan, clients: int, run: int) -> Load:
    """One run against a fresh Slurm; fails if Slurm holds fewer jobs than it acknowledged."""
    shutil.rmtree(plan.root / f"slurm-{clients}-{run}", ignore_errors=True)  # a retried run
    with SlurmCluster(plan.root / f"slurm-{clients}-{run}") as cluster:
        load = asyncio.run(drive(cluster.target(), clients, plan.http_warmup, plan.http_seconds))
        held = cluster.queued()
        if held < load.records:
            raise RuntimeError(f"{load.records} submissions acknowledged, slurmctld holds {held}")
    shutil.rmtree(plan.root / f"slurm-{clients}-{run}", ignore_errors=True)
    return load


def retried(run: Callable[[], Load], tries: int = 3) -> Load:
    """`run`, again when its server lost its port to another process between `free_port`
    and its bind (a shared machine: builds and test suites take loopback ports too)."""
    for attempt in range(tries):
        try:
            return run()
        except RuntimeError as exc:
            text = str(exc).lower()
            if attempt + 1 == tries or "already in use" not in text:
                raise
            print(f"  port taken, run again: {str(exc).splitlines()[-1]}", file=sys.stderr)
    raise AssertionError("unreachable")


@dataclass
class Level:
    """One client count's runs, per side."""

    clients: int
    runs: dict[str, list[Load]] = field(default_factory=dict)

    def rate(self, side: str) -> float:
        return median([r.jobs_per_s for r in self.runs[side]])

    def p99(self, side: str) -> float:
        return median([r.p99_ms for r in self.runs[side]])

    def cpu_us(self, side: str) -> float:
        return median([r.cpu_us_per_job for r in self.runs[side]])

    def cells(self, side: str) -> list[str]:
        runs = self.runs[side]
        rates = [r.jobs_per_s for r in runs]
        errors = sum(r.errors for r in runs)
        return [
            f"{self.rate(side):,.0f} ({spread(rates)})",
            f"{median([r.p50_ms for r in runs]):.1f} / {self.p99(side):.1f}",
            f"{self.cpu_us(side):,.0f}" + (f" ({errors} errors)" if errors else ""),
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slurmrest", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per side and level")
    parser.add_argument("--clients", default="1,8,64", help="comma-separated client counts")
    parser.add_argument(
        "--fsync",
        default="interval,always",
        help="XCE wal_fsync modes to run, comma-separated (interval, always)",
    )
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    absent = missing()
    if absent:
        parser.error(
            f"not installed: {', '.join(absent)} (apt-get install slurmctld slurmd "
            "slurmrestd munge)"
        )
    if os.geteuid() != 0:
        parser.error("run as root: slurmctld and slurmd run as SlurmUser=root in this bench")
    pwd.getpwnam(USER)
    levels = [int(c) for c in args.clients.split(",") if c.strip()]
    modes = [m.strip() for m in args.fsync.split(",") if m.strip()]
    bad = sorted(set(modes) - {"interval", "always"})
    if bad:
        parser.error(f"unknown wal_fsync mode {', '.join(bad)} (known: interval, always)")
    sides = ["slurmrestd"] + [f"xce {m}" for m in modes]
    load_before = psutil.getloadavg()
    results = [Level(c) for c in levels]
    with tempfile.TemporaryDirectory(prefix="xce-slurmrest-", dir=args.dir) as tmp:
        Path(tmp).chmod(0o711)  # slurmrestd, as `nobody`, reads slurm.conf below it
        plan = Plan.make(True, Path(tmp))
        plan = Plan(
            **{
                **vars(plan),
                "http_runs": args.runs,
                "http_warmup": args.warmup,
                "http_seconds": args.seconds,
            }
        )
        for run_no in range(args.runs):
            # ABBA: Slurm first on even runs, last on odd ones, so drift hits both alike
            order = sides if run_no % 2 == 0 else sides[::-1]
            for level in results:
                for side in order:
                    if side == "slurmrestd":
                        load = retried(partial(measure_slurm, plan, level.clients, run_no))
                    else:
                        mode = side.split()[1]
                        load = retried(
                            partial(measure, plan, level.clients, mode, run_no, tag=f"-{mode}")
                        )
                    level.runs.setdefault(side, []).append(load)
                    print(
                        f"  run {run_no + 1} {level.clients:>3} clients {side:<13} "
                        f"{load.jobs_per_s:>7,.0f}/s p99 {load.p99_ms:6.1f} ms "
                        f"{load.cpu_us_per_job:>6,.0f} us CPU/submit",
                        file=sys.stderr,
                        flush=True,
                    )
    load_after = psutil.getloadavg()
    head = ["clients", "side", "submits/s median (min..max)", "p50 / p99 ms", "server us CPU/sub"]
    rows = [head]
    for level in results:
        for side in sides:
            rows.append([str(level.clients), side, *level.cells(side)])
    print(
        f"REST submit, {args.runs} runs per side (alternating), {args.seconds:g} s windows, "
        f"medians; load average {load_before[0]:.1f} -> {load_after[0]:.1f} on "
        f"{psutil.cpu_count()} CPUs"
    )
    print(grid(rows))
    ratios = [["clients", "XCE mode", "rate XCE / Slurm", "p99 XCE / Slurm", "CPU XCE / Slurm"]]
    for level in results:
        for mode in modes:
            side = f"xce {mode}"
            ratios.append(
                [
                    str(level.clients),
                    mode,
                    f"{level.rate(side) / level.rate('slurmrestd'):.2f}x",
                    f"{level.p99(side) / level.p99('slurmrestd'):.2f}x",
                    f"{level.cpu_us(side) / level.cpu_us('slurmrestd'):.2f}x",
                ]
            )
    print(grid(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
