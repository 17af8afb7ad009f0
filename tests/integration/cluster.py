"""A real cluster for tests: a controller and workers as separate processes on 127.0.0.1."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService

# One signing key folder per test run; each cluster's controller gets a copy, so these tokens
# (an admin login and a worker service token) are valid on every test cluster.
KEYS = Path(tempfile.mkdtemp(prefix="xce-cluster-keys-"))
atexit.register(shutil.rmtree, KEYS, True)
ISSUER = TokenService.open(KEYS, "xce", "xce-api", 4 * 3600.0, 86400.0)
ADMIN_TOKEN = ISSUER.issue("admin", (), ("admin",))[0]
WORKER_TOKEN = ISSUER.issue("worker", (), ("worker",), "service")[0]
USER_TOKEN = ISSUER.issue("alice", (), ("user",))[0]  # role user, name alice


def kill_worker_jobs(name: str, spool_dir: Path) -> None:
    """Kill and remove every job cgroup a worker of this name and spool left behind."""
    from tests.worker.local_host import remove_namespace
    from xce.worker.agent.hostinfo import cgroup_namespace
    from xce.worker.cgroups import detect

    try:
        backend = detect("auto", "", cgroup_namespace(name, spool_dir))  # as the worker did
    except (OSError, RuntimeError, ValueError):
        return
    for job in backend.existing():
        cgroup = backend.open(job)
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.kill()
            with contextlib.suppress(OSError):
                cgroup.remove()
    remove_namespace(backend)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def linux_users(*names: str) -> Iterator[None]:
    """Linux accounts for jobs that run as their submitters (root only), removed again when
    the test ends so that runs do not leave users behind. The names are the tests' own
    (`xce...`): an account left by an earlier, interrupted run is reused and removed too."""
    for name in names:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], capture_output=True)
    try:
        yield
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)


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
        # [controller] fence_timeout_s: short, so a lost host's jobs are requeued within a
        # test's patience, but longer than a controller restart in the crash tests (workers
        # kill their jobs after this long without a controller).
        self.fence_timeout = 5.0
        self.queues = queues
        self.controller: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.worker_names: set[str] = set()
        # A worker that reaches the controller another way (e.g. through a proxy the test cuts).
        self.worker_controllers: dict[str, list[str]] = {}
        self.logs: list[Path] = []
        self.extra_controller = ""
        # Small preallocated WAL segments: 64 MiB each, times every controller of a full
        # run, times the three runs pytest keeps, filled the temp directory.
        self.wal_segment_mb = 1
        # TLS tests: extra config text per role ("controller" or a worker name), and the
        # context urllib uses for https:// (see tests/integration/test_tls.py).
        self.role_sections: dict[str, str] = {}
        self.ssl_context: ssl.SSLContext | None = None
        self.extra_auth = ""  # lines for [auth], e.g. a [[auth.backend]] users file
        self.worker_tokens: dict[str, str] = {}  # worker name -> its token (default: shared)
        self.candidate_urls: list[str] = []  # cluster.controllers for HA; empty: [self.url]
        self.cluster_extra = ""  # more [cluster] lines (HA timeouts, replication mode)
        # The job directories' parent: one every user can traverse (pytest's temporary
        # directories are 0700 root), so jobs of unprivileged users can enter theirs.
        self.jobs_root = Path(tempfile.mkdtemp(prefix="xce-jobs-", dir="/tmp"))
        os.chmod(self.jobs_root, 0o711)

    # --- processes -----------------------------------------------------------------------

    def _config(self, worker: str | None = None, slots: int = 4, attrs: str = "") -> Path:
        worker_section = ""
        if worker:
            worker_section = f"""
[worker]
name = "{worker}"
slots = {slots}
memory_mb = 4096
spool_dir = "{self.root / worker}"
jobs_dir = "{self.jobs_root / worker}"
token = "{self.worker_tokens.get(worker, WORKER_TOKEN)}"
heartbeat_interval_s = {self.heartbeat}
usage_interval_s = 0.2
kill_grace_s = 2.0
allow_root_jobs = true
{attrs}
"""
        controllers = self.candidate_urls or [self.url]
        if worker and worker in self.worker_controllers:
            controllers = self.worker_controllers[worker]
        text = f"""
[cluster]
controllers = {json.dumps(controllers)}
{self.cluster_extra}

[controller]
listen = "127.0.0.1:{self.port}"
state_dir = "{self.root / "controller"}"
heartbeat_interval_s = {self.heartbeat}
missed_heartbeats = 3
fence_timeout_s = {self.fence_timeout}
schedule_interval_s = 0.2
# Tests submit as root (the default user of `submit` below), as the workers allow.
allow_root_jobs = true
wal_segment_mb = {self.wal_segment_mb}
{self.extra_controller}

[auth]
{self.extra_auth}

[[queue]]
name = "normal"
priority = 30

[[queue]]
name = "fragile"
priority = 10
on_host_failure = "exit"
{self.queues}
{worker_section}
{self.role_sections.get(worker or "controller", "")}
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
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
        )

    def start_controller(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        keys = key_dir(self.root / "controller")
        if not keys.exists():
            (self.root / "controller").mkdir(mode=0o700, exist_ok=True)
            shutil.copytree(KEYS, keys)
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
        self.worker_names.add(name)
        self.workers[name] = self._spawn(name, "worker", "-c", str(cfg))
        self.wait_for(
            lambda: any(
                h["name"] == name and h["status"] == "online"
                for h in self.get("/api/v1/hosts")["hosts"]
            ),
            20,
            f"worker {name} online",
        )

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
        # Jobs outlive their worker (their keepers fence them only after fence_timeout_s):
        # make sure none outlives the test.
        for name in self.worker_names:
            kill_worker_jobs(name, self.root / name)
        shutil.rmtree(self.jobs_root, ignore_errors=True)

    def log_text(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in self.logs if p.exists())

    # --- HTTP --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = ADMIN_TOKEN,
        raw: bytes | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> Any:
        headers = dict(extra_headers or {})
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
            with urllib.request.urlopen(req, timeout=30, context=self.ssl_context) as resp:
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

    def scheduling_passes(self) -> int:
        return int(self.get("/api/v1/cluster")["scheduler"]["scheduling_passes"])

    def wait_passes(self, count: int = 2, timeout: float = 30) -> None:
        """Wait for `count` more scheduling passes: after two, every pending job has been
        through a whole pass that started after this call (the first may have taken its
        snapshot before), so "still pending" means the scheduler said no, not "not yet".
        A progress condition instead of a fixed sleep: as fast as the scheduler, and still
        meaningful on a loaded machine."""
        start = self.scheduling_passes()
        self.wait_for(
            lambda: self.scheduling_passes() >= start + count,
            timeout,
            f"{count} scheduling passes after pass {start}",
        )

    def wait_state(self, job_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
        result: dict[str, Any] = {}

        def check() -> bool:
            result.update(self.job(job_id))
            return result["state"] in states

        self.wait_for(check, timeout, f"job {job_id} in {states} (last {result.get('state')})")
        return result
