"""A real cluster for tests: a controller and workers as separate processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ADMIN_TOKEN = "test-admin-token"
WORKER_TOKEN = "test-worker-token"
USER_TOKEN = "test-user-token"  # role user, name alice


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiFailure(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


class Cluster:
    def __init__(self, root: Path, queues: str = "", heartbeat: float = 0.3) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.heartbeat = heartbeat
        self.queues = queues
        self.controller: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: list[Path] = []
        self.extra_controller = ""

    # --- processes -----------------------------------------------------------------------

    def _config(self, worker: str | None = None, slots: int = 4, attrs: str = "") -> Path:
        digest = [hashlib.sha256(t.encode()).hexdigest()
                  for t in (ADMIN_TOKEN, WORKER_TOKEN, USER_TOKEN)]
        worker_section = ""
        if worker:
            worker_section = f"""
[worker]
name = "{worker}"
slots = {slots}
memory_mb = 4096
spool_dir = "{self.root / worker}"
token = "{WORKER_TOKEN}"
heartbeat_interval_s = {self.heartbeat}
usage_interval_s = 0.2
kill_grace_s = 2.0
allow_root_jobs = true
{attrs}
"""
        text = f"""
[cluster]
controllers = ["{self.url}"]

[controller]
listen = "127.0.0.1:{self.port}"
state_dir = "{self.root / 'controller'}"
heartbeat_interval_s = {self.heartbeat}
missed_heartbeats = 3
schedule_interval_s = 0.2
{self.extra_controller}

[auth]
tokens = [
  {{ name = "admin", role = "admin", sha256 = "{digest[0]}" }},
  {{ name = "worker", role = "worker", sha256 = "{digest[1]}" }},
  {{ name = "alice", role = "user", sha256 = "{digest[2]}" }},
]

[[queue]]
name = "normal"
priority = 30

[[queue]]
name = "fragile"
priority = 10
on_host_failure = "exit"
{self.queues}
{worker_section}
"""
        path = self.root / f"{worker or 'controller'}.toml"
        path.write_text(text)
        return path

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        self.logs.append(log)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            [sys.executable, "-m", "xce", *args],
            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
        )

    def start_controller(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.controller = self._spawn("controller", "controller", "-c", str(self._config()))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.get("/healthz")
                return
            except (OSError, ApiFailure):
                time.sleep(0.1)
        raise RuntimeError("controller did not start:\n" + self.log_text())

    def start_worker(self, name: str, slots: int = 4, attrs: str = "") -> None:
        cfg = self._config(name, slots, attrs)
        self.workers[name] = self._spawn(name, "worker", "-c", str(cfg))
        self.wait_for(lambda: any(h["name"] == name and h["status"] == "online"
                                  for h in self.get("/api/v1/hosts")["hosts"]), 20,
                      f"worker {name} online")

    def kill_worker(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.workers.pop(name)
        proc.send_signal(sig)
        proc.wait(10)

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.controller]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), self.controller]:
            if proc is None:
                continue
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        # Jobs run in their own sessions: make sure none outlives the test.
        for pid_file in self.root.glob("*/jobs/*/.xce/pid"):
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)

    def log_text(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in self.logs if p.exists())

    # --- HTTP --------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, token: str | None = ADMIN_TOKEN,
                raw: bytes | None = None) -> Any:
        headers = {}
        data = None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            data = raw
            headers["Content-Type"] = "application/octet-stream"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                payload = resp.read()
                if resp.headers.get_content_type() == "application/json":
                    return json.loads(payload)
                return payload
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = {"raw": text.decode(errors="replace")}
            raise ApiFailure(exc.code, parsed) from None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body if body is not None else {}, **kw)

    def submit(self, **body: Any) -> str:
        body.setdefault("user", "root")
        return self.post("/api/v1/jobs", body)["job_id"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.get(f"/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}")

    def control(self, job_id: str, action: str) -> Any:
        return self.post(f"/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}/{action}")

    def download(self, job_id: str, name: str) -> bytes:
        return self.get(f"/api/v1/jobs/{urllib.parse.quote(job_id, safe='')}/files/{name}")

    def wait_for(self, predicate: Any, timeout: float = 30, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}\n{self.log_text()}")

    def wait_state(self, job_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
        result: dict[str, Any] = {}

        def check() -> bool:
            result.update(self.job(job_id))
            return result["state"] in states

        self.wait_for(check, timeout, f"job {job_id} in {states} (last {result.get('state')})")
        return result
