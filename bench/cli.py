"""CLI start-up: `python -m bench.cli [--runs N] [--loop N] [--batch N] [--binary PATH]`.

Every `xce` command must start within 3x a bare `python3 -c pass` on the same
machine, since users and their scripts run `xce job submit` and `xce job list` in loops as
they do `sbatch` and `squeue`. This starts a one-machine cluster (`xce up` in a temporary
directory), then for each command measures, interleaved so that load from other processes
hits every row alike:

- `python3 -c pass` (the floor), the command, and `curl` of the same route (the network and
  controller part alone);
- wall time and CPU time (user + system of the child: on a busy shared machine CPU time is
  the steadier figure), median of `--runs` runs;
- a shell loop of `--loop` submissions (`for i in ...; do xce job submit true; done`): jobs/s;
- beside it, `xce job submit --batch FILE` of `--batch` lines (one start, one connection).

The commands run with compiled bytecode, as an installed `xce` (pip writes it) and the packaged
one have it: a development environment with PYTHONDONTWRITEBYTECODE would otherwise compile
every imported XCE module at every start, which no user pays. The children write it under a
temporary PYTHONPYCACHEPREFIX (not into the tree), one warm-up run first;
`--no-bytecode-cache` keeps the environment as it is.

`--binary PATH` (repeat) adds rows for a packaged `xce` (the onedir build or an extracted
AppImage's AppRun); its floor is still `python3 -c pass`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT = 3.0  # times a bare interpreter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall and CPU seconds of one child, and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    code = subprocess.run(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    ).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


class Up:
    """`xce up` in a temporary directory, stopped on exit."""

    def __init__(self, root: Path, bytecode: bool = True) -> None:
        self.root = root
        self.port = _free_port()
        self.env = {**os.environ, "XCE_CLIENT_CONFIG": str(root / "client.toml")}
        for key in ("XCE_TOKEN", "XCE_CONTROLLERS"):
            self.env.pop(key, None)
        # Its own local socket: not /run/xce/xce.sock, where other clients of this machine
        # would find it.
        self.env["XCE_SOCKET"] = str(root / "xce.sock")
        if bytecode:  # as installed: compiled once, not at every start
            self.env.pop("PYTHONDONTWRITEBYTECODE", None)
            self.env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        self.log = root / "up.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "xce",
                "up",
                "--state-dir",
                str(root / "state"),
                "--port",
                str(self.port),
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        deadline = time.monotonic() + 60
        while "XCE is up" not in self.log.read_text():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"xce up did not start:\n{self.log.read_text()}")
            time.sleep(0.2)
        self.token = (root / "state" / "admin.token").read_text().strip()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--loop", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1000, help="lines of the --batch row")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE if set (every start compiles XCE's modules)",
    )
    parser.add_argument(
        "--binary",
        type=Path,
        action="append",
        default=[],
        help="a packaged xce (repeat): onedir build, extracted AppImage",
    )
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xce-bench-cli-") as tmp:
        up = Up(Path(tmp), bytecode=not opts.no_bytecode_cache)
        try:
            rows = _measure(up, opts)
        finally:
            up.stop()
    _print(rows, not opts.no_bytecode_cache)


def _measure(up: Up, opts: argparse.Namespace) -> list[tuple[str, float, float, float, str]]:
    env = up.env
    xce = [sys.executable, "-m", "xce"]
    first = subprocess.run(
        [*xce, "job", "submit", "-J", "bench", "true"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job_id = first.split("<")[1].split(">")[0]
    auth = ["-H", f"Authorization: Bearer {up.token}"]
    curl = shutil.which("curl")
    commands: list[tuple[str, list[str], list[str] | None]] = [
        ("xce job list", [*xce, "job", "list"], ["/api/v1/jobs"]),
        ("xce job show", [*xce, "job", "show", job_id], [f"/api/v1/jobs/{job_id}"]),
        ("xce host list", [*xce, "host", "list"], ["/api/v1/hosts"]),
        (
            "xce job submit",
            [*xce, "job", "submit", "-J", "bench", "true"],
            [
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-d",
                '{"command": "true", "name": "bench"}',
                "/api/v1/jobs",
            ],
        ),
        ("xce job list --help", [*xce, "job", "list", "--help"], None),
        ("xce --help", [*xce, "--help"], None),
    ]
    for binary in opts.binary:
        label = str(binary)[-30:]
        for words in (
            ["job", "list"],
            ["job", "show", job_id],
            ["host", "list"],
            ["job", "submit", "-J", "bench", "true"],
        ):
            commands.append((f"{label} {' '.join(words[:2])}", [str(binary), *words], None))
    for _name, cmd, _route in commands:  # warm-up: bytecode written, files in the page cache
        _run(cmd, env)
    floor: list[tuple[float, float]] = []
    found: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in commands}
    found_curl: dict[str, list[float]] = {name: [] for name, _, _ in commands}
    for _ in range(opts.runs):
        w, c, _code = _run([sys.executable, "-c", "pass"], env)
        floor.append((w, c))
        for name, cmd, route in commands:
            w, c, code = _run(cmd, env)
            if code != 0:
                raise SystemExit(f"{name} failed (exit {code})")
            found[name].append((w, c))
            if route is not None and curl:
                *args, path = route
                w, _c, _code = _run(
                    [curl, "-sf", "-o", "/dev/null", *auth, *args, up.url + path], env
                )
                found_curl[name].append(w)
    floor_wall = statistics.median(w for w, _ in floor)
    floor_cpu = statistics.median(c for _, c in floor)
    rows = [("python3 -c pass", floor_wall, floor_cpu, 0.0, "floor")]
    for name, runs in found.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ratio = cpu / floor_cpu if floor_cpu else float("inf")
        curl_wall = statistics.median(found_curl[name]) if found_curl[name] else 0.0
        verdict = f"{ratio:.1f}x {'ok' if ratio <= LIMIT else 'OVER'}"
        rows.append((name, wall, cpu, curl_wall, verdict))
    started = time.perf_counter()
    script = (
        f"for i in $(seq {opts.loop}); do {' '.join(xce)} job submit true >/dev/null "
        f"|| exit 1; done"
    )
    subprocess.run(["bash", "-c", script], env=env, check=True)
    elapsed = time.perf_counter() - started
    rows.append(
        (
            f"shell loop: {opts.loop} x xce job submit",
            elapsed,
            0.0,
            0.0,
            f"{opts.loop / elapsed:.1f} jobs/s",
        )
    )
    if not opts.batch:  # --batch 0: a tree without `--batch` (a baseline)
        return rows
    listing = up.root / "batch.txt"
    listing.write_text("-J bench true\n" * opts.batch)
    wall, cpu, code = _run([*xce, "job", "submit", "--batch", str(listing)], env)
    if code != 0:
        raise SystemExit(f"xce job submit --batch failed (exit {code})")
    rows.append(
        (
            f"xce job submit --batch: {opts.batch} lines",
            wall,
            cpu,
            0.0,
            f"{opts.batch / wall:.1f} jobs/s",
        )
    )
    return rows


def _print(rows: list[tuple[str, float, float, float, str]], bytecode: bool = True) -> None:
    cache = "compiled once (as installed)" if bytecode else "as the environment has it"
    print(f"bytecode: {cache}; limit {LIMIT:.1f}x the floor's CPU time")
    print(f"{'command':44} {'wall s':>7} {'cpu s':>7} {'curl s':>7}  vs floor (cpu)")
    for name, wall, cpu, curl_wall, verdict in rows:
        curl_text = f"{curl_wall:7.3f}" if curl_wall else "      -"
        cpu_text = f"{cpu:7.3f}" if cpu else "      -"
        print(f"{name:44} {wall:7.3f} {cpu_text} {curl_text}  {verdict}")


if __name__ == "__main__":
    main()
