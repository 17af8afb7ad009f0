"""`xce init` makes a working cluster, and `xce init --join` adds a worker with a one-time token.

Real processes on 127.0.0.1: the CLI writes the cluster directory, a controller and a worker
start from its config over TLS (the generated CA, mutual TLS on worker routes), a job runs to
DONE; then a second worker joins over https with the printed token and CA hash, and reusing
that token, or pinning the wrong CA, is refused.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xce.setup.admin import verify_password


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xce(*args: str, env: dict[str, str] | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xce", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})},
                          stdin=subprocess.DEVNULL)


@dataclass
class InitCluster:
    root: Path
    dir: Path
    out: str
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, role: str, config: Path, name: str) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "xce", role, "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env}))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return xce(*args, env=self.env)

    def wait_host(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs:
                assert p.poll() is None, self.logs()
            hosts = self.cli("host", "list")
            if any(line.split()[:2] == [name, "online"] for line in hosts.stdout.splitlines()):
                return
            assert time.monotonic() < deadline, hosts.stdout + hosts.stderr + self.logs()
            time.sleep(0.3)

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.root.glob("*.log")))

    def printed(self, pattern: str) -> str:
        found = re.search(pattern, self.out)
        assert found, self.out
        return found.group(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InitCluster]:
    root = tmp_path_factory.mktemp("init")
    port = _free_port()
    made = xce("init", str(root / "cluster"), "--host", "127.0.0.1", "--listen", "127.0.0.1",
               "--port", str(port), "--allow-root-jobs")
    assert made.returncode == 0, made.stderr
    c = InitCluster(root, root / "cluster", made.stdout,
                    {"XCE_CLIENT_CONFIG": str(root / "cluster" / "client.toml")})
    try:
        c.start("controller", c.dir / "xce.toml", "controller")
        c.start("worker", c.dir / "xce.toml", "worker")
        yield c
    finally:
        for p in c.procs:
            p.terminate()
        for p in c.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def test_init_writes_a_private_directory_with_admin_and_units(cluster: InitCluster) -> None:
    d = cluster.dir
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for secret in ("xce.toml", "admin.token", "worker.token", "users.toml", "client.toml",
                   "tls/ca.key", "tls/controller.key"):
        assert stat.S_IMODE((d / secret).stat().st_mode) == 0o600, secret
    config = tomllib.loads((d / "xce.toml").read_text())
    assert config["cluster"]["controllers"][0].startswith("https://127.0.0.1:")
    assert config["tls"]["require_client_cert"] == "workers"
    assert "# Ordered controller candidates" in (d / "xce.toml").read_text()  # commented

    password = cluster.printed(r"shown only this once.*\n\s+(\S+)")
    users = tomllib.loads((d / "users.toml").read_text())["users"]
    assert users["admin"]["roles"] == ["admin"] and users["admin"]["groups"] == ["admins"]
    assert verify_password(password, users["admin"]["password"])
    assert password not in (d / "users.toml").read_text()

    for unit in ("xce-controller.service", "xce-standby.service", "xce-worker.service"):
        text = (d / "systemd" / unit).read_text()
        assert "@" not in text.replace("multi-user", ""), unit  # every placeholder filled
        assert f"--config {d / 'xce.toml'}" in text and "ExecStart=" in text
    assert "ReadWritePaths=" + str(d) in (d / "systemd" / "xce-controller.service").read_text()

    again = xce("init", str(d), "--host", "127.0.0.1")
    assert again.returncode != 0 and "never overwrites" in again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr


def test_the_new_cluster_runs_a_job_over_tls(cluster: InitCluster) -> None:
    cluster.wait_host(socket.gethostname())
    submitted = cluster.cli("job", "submit", "--", "echo hello from init")
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.search(r"Job <(\d+)>", submitted.stdout).group(1)  # type: ignore[union-attr]
    waited = cluster.cli("job", "wait", job_id, "--timeout", "30")
    assert waited.returncode == 0 and "DONE" in waited.stdout, waited.stdout + waited.stderr
    assert cluster.cli("job", "output", job_id).stdout == "hello from init\n"
