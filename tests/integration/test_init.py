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
        "--site-config",
        str(root / "etc" / "client.toml"),
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
    join = cluster.printed(r"(xce init \S+ --join .*)")
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


def _site_env(cluster: InitCluster, home: Path, **extra: str) -> dict[str, str]:
    """A user of this node with nothing of their own: an empty HOME, no XCE_* settings, and
    the site file `xce init --site-config` wrote."""
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "XDG_"))}
    return {
        **env,
        "HOME": str(home),
        "XCE_SITE_CONFIG": str(cluster.root / "etc" / "client.toml"),
    } | extra


def _run(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        input=stdin,
    )


def test_init_prints_the_directories_it_used(cluster: InitCluster) -> None:
    site = cluster.root / "etc" / "client.toml"
    assert f"Start this node:  xce up --state-dir {cluster.dir}" in cluster.out
    join = cluster.printed(r"(xce init \S+ --join .*)")
    assert join.startswith(f"xce init {cluster.dir} --join https://127.0.0.1:")
    assert join.endswith(f"--site-config {site}") and "/etc/xce" not in cluster.out
    made = cluster.cli("token", "join", "--role", "worker", "--ttl-hours", "1")
    assert made.returncode == 0, made.stderr
    assert f"xce init {cluster.dir} --join https://127.0.0.1:" in made.stdout, made.stdout


def test_init_writes_a_public_site_config_with_the_ca_beside_it(cluster: InitCluster) -> None:
    site = cluster.root / "etc" / "client.toml"
    ca = cluster.root / "etc" / "ca.pem"
    for public in (site, ca):
        assert stat.S_IMODE(public.stat().st_mode) == 0o644, public
    assert stat.S_IMODE(site.parent.stat().st_mode) == 0o755
    assert ca.read_text() == (cluster.dir / "tls" / "ca.pem").read_text()
    assert sorted(p.name for p in site.parent.iterdir()) == ["ca.pem", "client.toml"]  # no key
    data = tomllib.loads(site.read_text())
    assert data == {
        "controllers": tomllib.loads((cluster.dir / "xce.toml").read_text())["cluster"][
            "controllers"
        ],
        "ca_file": str(ca),
    }
    assert f"site config:   {site}" in cluster.out


def test_a_site_config_inside_the_cluster_directory_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "c" / "client.toml"
    refused = xce("init", str(tmp_path / "c"), "--host", "127.0.0.1", "--site-config", str(inside))
    assert refused.returncode != 0 and "inside the cluster directory" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert not (tmp_path / "c").exists()  # refused before anything was made


def test_a_user_with_only_the_site_file_reaches_the_tls_cluster(
    cluster: InitCluster, tmp_path: Path
) -> None:
    """No client.toml of their own, no XCE_* variable: the controllers and the CA come from
    the site file, the token from `xce login` with the printed admin password."""
    cluster.wait_host(socket.gethostname())
    env = _site_env(cluster, tmp_path / "home")
    password = cluster.printed(r"shown only this once.*\n\s+(\S+)")
    login = _run(env, "login", getpass.getuser(), stdin=password + "\n")
    assert login.returncode == 0, login.stderr
    listed = _run(env, "job", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:3] == ["JOBID", "USER", "STAT"]
    assert not (tmp_path / "home" / ".config" / "xce" / "client.toml").exists()

    # The user's own values win over the site's, key by key: a controller of their own...
    own = tmp_path / "home" / ".config" / "xce" / "client.toml"
    nobody = f"https://127.0.0.1:{_free_port()}"
    own.write_text(f'controllers = ["{nobody}"]\n')
    elsewhere = _run(env, "job", "list")
    assert elsewhere.returncode != 0 and f"tried {nobody}" in elsewhere.stderr, elsewhere.stderr
    # ... and a CA of their own (the wrong one here), while the site still gives controllers.
    other_ca = tmp_path / "other"
    made = xce("tls", "init", "--dir", str(other_ca), "--host", "127.0.0.1")
    assert made.returncode == 0, made.stderr
    own.write_text(f'ca_file = "{other_ca / "ca.pem"}"\n')
    refused = _run(env, "job", "list")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1, refused.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in lines[0]
    assert f"CA file tried: {other_ca / 'ca.pem'} (ca_file in {own}" in lines[0], lines[0]


def test_tls_failures_name_the_ca_setting_and_file(cluster: InitCluster, tmp_path: Path) -> None:
    url = tomllib.loads((cluster.dir / "xce.toml").read_text())["cluster"]["controllers"][0]
    # No CA anywhere: the system's CAs do not know the cluster's; the line says none was set.
    bare = _site_env(cluster, tmp_path / "home", XCE_SITE_CONFIG="", XCE_CONTROLLERS=url)
    for args in (("job", "list"), ("host", "list")):  # the light client and the async one
        refused = _run(bare, *args)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode != 0 and len(lines) == 1, refused.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in lines[0] and "Traceback" not in refused.stderr
        assert "no CA file was configured (ca_file in " in lines[0], lines[0]
        assert "XCE_CA_FILE" in lines[0]
    # XCE_CA_FILE naming a CA that did not sign the controller: that file and that variable.
    other_ca = tmp_path / "other"
    assert xce("tls", "init", "--dir", str(other_ca), "--host", "x").returncode == 0
    wrong = _site_env(cluster, tmp_path / "home", XCE_CA_FILE=str(other_ca / "ca.pem"))
    refused = _run(wrong, "job", "list")
    assert f"CA file tried: {other_ca / 'ca.pem'} (XCE_CA_FILE)" in refused.stderr, refused.stderr


def test_user_list_shows_the_default_role(cluster: InitCluster) -> None:
    """A user with no role of their own is a `user` (the default roles), not `-`."""
    added = subprocess.run(
        [sys.executable, "-m", "xce", "user", "add", "plainuser", "--group", "physics"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **cluster.env},
        input="plain-password-1\nplain-password-1\n",
    )
    assert added.returncode == 0, added.stderr
    rows = {
        line.split()[0]: line.split() for line in cluster.cli("user", "list").stdout.splitlines()
    }
    assert rows["plainuser"] == ["plainuser", "physics", "user"], rows
    assert rows[getpass.getuser()][-1] == "admin"
