"""Accounting commands' wall time: `python -m bench.acct_cli [--runs 5] [--before DIR]`.

`xce acct`, `xce report` and `xce job eff` against a one-machine cluster (`xce up` in a
temporary directory) holding a few finished jobs, each run `--runs` times, interleaved with
`python3 -c pass` (the floor) so that load from other processes hits every row alike;
medians of wall and CPU time (user + system of the child). `--before DIR` adds the same
commands run from another source tree (e.g. `git archive <commit> xce | tar -x -C DIR`),
side by side: the figure for the README's fast-path row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cli import Up


def _run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int]:
    """Wall and CPU seconds of one child, and its exit code (`cwd`: where `python -m xce`
    finds its tree first, so a `--before` tree is not shadowed by this one)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    code = subprocess.run(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    ).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another source tree to compare with")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xce-bench-acct-") as tmp:
        up = Up(Path(tmp))
        try:
            rows = _measure(up, opts, Path(tmp))
        finally:
            up.stop()
    print(f"{'command':40} {'wall s':>7} {'cpu s':>7}")
    for name, wall, cpu in rows:
        print(f"{name:40} {wall:7.3f} {cpu:7.3f}")


def _measure(up: Up, opts: argparse.Namespace, tmp: Path) -> list[tuple[str, float, float]]:
    env = up.env
    xce = [sys.executable, "-m", "xce"]
    ids = [
        json.loads(
            subprocess.run(
                [*xce, "job", "submit", "--json", "true"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["job_id"]
        for _ in range(3)
    ]
    deadline = time.monotonic() + 120
    while True:  # every job finished and in the store
        out = subprocess.run(
            [*xce, "acct", "--json"], env=env, capture_output=True, text=True
        ).stdout
        if out and len(json.loads(out)["jobs"]) >= len(ids):
            break
        if time.monotonic() > deadline:
            raise SystemExit("the jobs did not finish")
        time.sleep(1)
    trees = [("", env, None)]
    if opts.before is not None:
        trees.append((" (before)", {**env, "PYTHONPATH": str(opts.before.resolve())}, tmp))
    commands = [
        ("xce acct", ["acct"]),
        ("xce report", ["report"]),
        ("xce job eff", ["job", "eff", ids[0]]),
    ]
    found: dict[str, list[tuple[float, float]]] = {}
    floor: list[tuple[float, float]] = []
    for _ in range(opts.runs):
        w, c, _code = _run([sys.executable, "-c", "pass"], env)
        floor.append((w, c))
        for name, args in commands:
            for label, tree_env, cwd in trees:
                w, c, code = _run([*xce, *args], tree_env, cwd)
                if code != 0:
                    raise SystemExit(f"{name}{label} failed (exit {code})")
                found.setdefault(name + label, []).append((w, c))
    rows = [
        (
            "python3 -c pass",
            statistics.median(w for w, _ in floor),
            statistics.median(c for _, c in floor),
        )
    ]
    for name, runs in found.items():
        rows.append(
            (name, statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        )
    return rows


if __name__ == "__main__":
    main()
