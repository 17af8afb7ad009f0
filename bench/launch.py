"""Figure 14: trivial jobs executed per second on one worker, contained in cgroups or not.

A real controller and a real worker (2 slots), one array of `true` tasks; the rate is tasks
over the time from the submit to the last task's end. The same run is made with the worker's
`cgroup = "auto"` (a cgroup per attempt: create, limits, freeze/kill, usage, remove) and
`cgroup = "none"` (rlimits only), alternately, so both see the same machine; the verdict is
the ratio of the medians (the issue's target: containment costs at most 20 %). Every attempt
has its keeper in both modes, so this is the price of the cgroup alone; the keeper is a fork
of the worker's launcher process, not a Python start-up.
`python -m bench.launch` runs it alone.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.common import Plan, Row, median
from bench.controller import KEYS, TOKEN, Controller, free_port
from xce.auth.tokens import TokenService

WORKER_TOKEN = TokenService.open(KEYS, "xce", "xce-api", 12 * 3600.0, 86400.0).issue(
    "worker", (), ("worker",), "service"
)[0]
TARGET = 0.8  # cgroups / none


def _request(url: str, method: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _wait(check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.05)


def _one(root: Path, mode: str, tasks: int) -> float:
    """Tasks per second of one run with the worker's `cgroup = mode`."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    extra = "heartbeat_interval_s = 1.0\nschedule_interval_s = 0.05\nallow_root_jobs = true"
    with Controller(root, extra=extra) as ctl:
        cfg = root / "worker.toml"
        cfg.write_text(f"""
[cluster]
controllers = ["{ctl.url}"]

[worker]
name = "bench-{mode}-{free_port()}"
slots = 2
spool_dir = "{root / "worker"}"
jobs_dir = "{root / "jobs"}"
token = "{WORKER_TOKEN}"
heartbeat_interval_s = 1.0
allow_root_jobs = true
min_job_uid = 0
cgroup = "{mode}"
""")
        log = (root / "worker.log").open("ab")
        worker = subprocess.Popen(
            [sys.executable, "-m", "xce", "worker", "-c", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            _wait(
                lambda: any(
                    h["status"] == "online"
                    for h in _request(ctl.url, "GET", "/api/v1/hosts")["hosts"]
                ),
                30,
            )
            started = time.monotonic()
            job = _request(
                ctl.url,
                "POST",
                "/api/v1/jobs",
                {"command": "true", "user": getpass.getuser(), "array": f"1-{tasks}"},
            )["job_id"]

            def done() -> bool:
                counts = _request(ctl.url, "GET", f"/api/v1/jobs/{job}")["array"]["counts"]
                return counts["DONE"] + counts["EXIT"] == tasks

            _wait(done, 600)
            return tasks / (time.monotonic() - started)
        finally:
            worker.terminate()
            worker.wait(10)
            log.close()


def run(plan: Plan) -> list[Row]:
    tasks = 100 if plan.quick else 400
    rates: dict[str, list[float]] = {"auto": [], "none": []}
    for i in range(plan.repeats):
        for mode in ("auto", "none"):
            rates[mode].append(_one(plan.root / f"launch-{mode}-{i}", mode, tasks))
    contained, bare = median(rates["auto"]), median(rates["none"])
    ratio = contained / bare
    return [
        Row(
            f"14 trivial jobs/s on 2 slots, {tasks} tasks: cgroups vs none",
            f"{contained:,.1f} vs {bare:,.1f} jobs/s (ratio {ratio:.2f})",
            f">= {TARGET:.2f}",
            "PASS" if ratio >= TARGET else "FAIL",
            data={"auto": rates["auto"], "none": rates["none"]},
        )
    ]


if __name__ == "__main__":
    import tempfile

    from bench.common import table

    with tempfile.TemporaryDirectory() as tmp:
        print(table(run(Plan.make("--full" not in sys.argv, Path(tmp)))))
    sys.exit(0)
