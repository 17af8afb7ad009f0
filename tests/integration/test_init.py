"""`xce init` makes a working cluster, and `xce init --join` adds a worker with a one-time token.

Real processes on 127.0.0.1: the CLI writes the cluster directory, a controller and a worker
start from its config over TLS (the generated CA, mutual TLS on worker routes), a job runs to
DONE; then a second worker joins over https with the printed token and CA hash, and reusing
that token, or pinning the wrong CA, is refused.
"""

from __future__ import annotations

import getpass
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

from xce.auth.keys import key_dir
from xce.auth.passwords import verify_password
from xce.auth.tokens import TokenService


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xce(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@dataclass
class InitCluster:
    root: Path
    dir: Path
    out: str
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, role: str, config: Path, name: str) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "xce", role, "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )
        )

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


def small_wal(config: Path) -> None:
    """Tests run controllers with 1 MiB WAL segments, not the 64 MiB `xce init` writes."""
    text = config.read_text()
    assert "\n[controller]\n" in text
    config.write_text(text.replace("\n[controller]\n", "\n[controller]\nwal_segment_mb = 1\n", 1))


def _controller_tokens(cluster: InitCluster) -> TokenService:
    return TokenService.open(key_dir(cluster.dir / "controller"), "xce", "xce-api", 43200, 86400)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InitCluster]:
    root = tmp_path_factory.mktemp("init")
    port = _free_port()
    made = xce(
        "init",
        str(root / "cluster"),
        "--host",
        "127.0.0.1",
        "--listen",
        "127.0.0.1",
        "--port",
        str(port),
        "--allow-root-jobs",
    )
    assert made.returncode == 0, made.stderr
    c = InitCluster(
        root,
        root / "cluster",
        made.stdout,
        {"XCE_CLIENT_CONFIG": str(root / "cluster" / "client.toml")},
    )
    small_wal(c.dir / "xce.toml")
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
    for secret in (
        "xce.toml",
        "admin.token",
        "worker.token",
        "users.toml",
        "client.toml",
        "tls/ca.key",
        "tls/controller.key",
    ):
        assert stat.S_IMODE((d / secret).stat().st_mode) == 0o600, secret
    config = tomllib.loads((d / "xce.toml").read_text())
    assert config["cluster"]["controllers"][0].startswith("https://127.0.0.1:")
    assert config["tls"]["require_client_cert"] == "workers"
    assert "# Ordered controller candidates" in (d / "xce.toml").read_text()  # commented

    password = cluster.printed(r"shown only this once.*\n\s+(\S+)")
    me = getpass.getuser()  # the admin is whoever ran init, as with `xce up`
    assert f"Admin user '{me}'" in cluster.out
    users = tomllib.loads((d / "users.toml").read_text())["users"]
    assert users[me]["roles"] == ["admin"] and users[me]["groups"] == ["admins"]
    assert verify_password(password, users[me]["password"])
    assert password not in (d / "users.toml").read_text()
    # JWTs from the controller's signing key (created in its state directory), no static
    # tokens in the config: an admin token for the CLI and a worker service token.
    assert "tokens" not in config["auth"]
    assert config["auth"]["backend"] == [{"type": "configfile", "path": "users.toml"}]
    tokens = _controller_tokens(cluster)
    admin = tokens.verify((d / "admin.token").read_text().strip())
    assert (admin.user, admin.roles, admin.kind) == (me, ("admin",), "user")
    worker = tokens.verify((d / "worker.token").read_text().strip())
    assert (worker.roles, worker.kind) == (("worker",), "service")
    # Bound to this node's worker, as joined nodes' tokens are: no shared token that can
    # register any host name.
    assert (worker.user, worker.host) == (socket.gethostname(), socket.gethostname())

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


def test_a_worker_joins_with_the_printed_token_once(cluster: InitCluster) -> None:
    join = cluster.printed(r"(xce init /etc/xce --join .*)")
    url, token, ca_hash = re.search(r"--join (\S+) --token (\S+) --ca-hash (\S+)", join).groups()  # type: ignore[union-attr]
    w2 = cluster.root / "w2"
    joined = xce(
        "init", str(w2), "--join", url, "--token", token, "--ca-hash", ca_hash, "--name", "w2"
    )
    assert joined.returncode == 0, joined.stderr
    assert stat.S_IMODE((w2 / "tls" / "w2.key").stat().st_mode) == 0o600
    assert (w2 / "tls" / "ca.pem").read_text() == (cluster.dir / "tls" / "ca.pem").read_text()
    # w2 got a service token of its own (subject w2, role worker), signed by the controller.
    claims = _controller_tokens(cluster).verify((w2 / "worker.token").read_text().strip())
    assert (claims.user, claims.roles, claims.kind) == ("w2", ("worker",), "service")
    assert '"service:w2"' in (cluster.dir / "controller" / "audit.log").read_text()
    assert (w2 / "systemd" / "xce-worker.service").exists()
    cluster.start("worker", w2 / "xce.toml", "w2")
    cluster.wait_host("w2")

    # With the first worker closed, a job can only run on w2: the joined node is a full
    # worker (its client certificate passes the controller's mTLS check on worker routes).
    first = socket.gethostname()
    assert cluster.cli("host", "close", first).returncode == 0
    try:
        only_w2 = cluster.cli("job", "submit", "--", "echo on w2")
        assert only_w2.returncode == 0, only_w2.stderr
        job_id = re.search(r"Job <(\d+)>", only_w2.stdout).group(1)  # type: ignore[union-attr]
        assert cluster.cli("job", "wait", job_id, "--timeout", "30").returncode == 0
        shown = cluster.cli("job", "show", job_id)
        assert "host: w2" in shown.stdout and "state: DONE" in shown.stdout, shown.stdout
    finally:
        assert cluster.cli("host", "open", first).returncode == 0

    reused = xce(
        "init",
        str(cluster.root / "w3"),
        "--join",
        url,
        "--token",
        token,
        "--ca-hash",
        ca_hash,
        "--name",
        "w3",
    )
    assert reused.returncode != 0 and "already used" in reused.stderr, reused.stderr
    assert "Traceback" not in reused.stderr and not (cluster.root / "w3").exists()


def test_a_wrong_ca_hash_is_refused_before_the_token_is_spent(cluster: InitCluster) -> None:
    made = cluster.cli("token", "join", "--role", "worker", "--ttl-hours", "1")
    assert made.returncode == 0, made.stderr
    url, token, ca_hash = re.search(
        r"--join (\S+) --token (\S+) --ca-hash (\S+)", made.stdout
    ).groups()  # type: ignore[union-attr]
    wrong = "sha256:" + "0" * 64
    refused = xce(
        "init",
        str(cluster.root / "w4"),
        "--join",
        url,
        "--token",
        token,
        "--ca-hash",
        wrong,
        "--name",
        "w4",
    )
    assert refused.returncode != 0 and "refusing to trust it" in refused.stderr
    accepted = xce(
        "init",
        str(cluster.root / "w4"),
        "--join",
        url,
        "--token",
        token,
        "--ca-hash",
        ca_hash,
        "--name",
        "w4",
    )
    assert accepted.returncode == 0, accepted.stderr

    # w4's token is its own: revoking the service w4 shuts out w4 alone.
    w4_token = (cluster.root / "w4" / "worker.token").read_text().strip()
    w2_token = (cluster.root / "w2" / "worker.token").read_text().strip()
    assert cluster.cli("token", "revoke", "w4").returncode == 0
    refused = xce("whoami", env={**cluster.env, "XCE_TOKEN": w4_token})
    assert refused.returncode != 0 and "revoked" in refused.stderr, refused.stderr
    still = xce("whoami", env={**cluster.env, "XCE_TOKEN": w2_token})
    assert still.returncode == 0 and "w2 (service)" in still.stdout, still.stderr


def test_join_tokens_need_an_admin(cluster: InitCluster) -> None:
    worker_token = (cluster.dir / "worker.token").read_text().strip()
    denied = xce("token", "join", env={**cluster.env, "XCE_TOKEN": worker_token})
    assert denied.returncode != 0 and "may not" in denied.stderr, denied.stderr


def test_the_printed_admin_password_logs_in(cluster: InitCluster) -> None:
    """The users file init wrote is the one the controller's configfile backend reads."""
    import json
    import ssl
    import urllib.request

    cluster.wait_host(socket.gethostname())
    password = cluster.printed(r"shown only this once.*\n\s+(\S+)")
    url = tomllib.loads((cluster.dir / "xce.toml").read_text())["cluster"]["controllers"][0]
    context = ssl.create_default_context(cafile=str(cluster.dir / "tls" / "ca.pem"))
    request = urllib.request.Request(
        url + "/api/v1/auth/login",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"username": getpass.getuser(), "password": password}).encode(),
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        session = json.loads(resp.read())
    assert session["user"] == getpass.getuser() and "admin" in session["roles"]
