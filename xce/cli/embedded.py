"""`xce up`: the embedded default cluster, a controller and one worker on this machine.

The first run creates the state directory (0700), a config, an admin token and a worker
token (only their SHA-256 digests go into the config), prints the admin token once, and
writes the client config so `xce job ...` in another shell finds the cluster. Later runs
reuse all of it. The two roles run as child processes, exactly as on a real cluster.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import typer

from xce.cli.common import client_config_path, fail
from xce.config import DEFAULT_PORT


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def _config_text(state_dir: Path, port: int, admin_hash: str, worker_hash: str) -> str:
    root_jobs = "true" if os.geteuid() == 0 else "false"
    return f"""# XCE embedded cluster, written by `xce up`. Edit and restart `xce up` to change it.
[cluster]
# Ordered controller candidates; clients and workers try them in this order.
controllers = ["http://127.0.0.1:{port}"]

[controller]
listen = "127.0.0.1:{port}"
state_dir = "{state_dir / 'controller'}"
heartbeat_interval_s = 2.0
missed_heartbeats = 3

[auth]
# Static tokens, stored as SHA-256 digests only.
tokens = [
  {{ name = "admin", role = "admin", sha256 = "{admin_hash}" }},
  {{ name = "worker", role = "worker", sha256 = "{worker_hash}" }},
]

[[queue]]
name = "normal"
priority = 30
description = "default queue"

[[queue]]
name = "short"
priority = 40
description = "short jobs, dispatched first"

[worker]
spool_dir = "{state_dir / 'worker'}"
token_file = "{state_dir / 'worker.token'}"
heartbeat_interval_s = 2.0
# Jobs submitted by root run as root only where this is true (set because `xce up` ran as
# root); a multi-user cluster should leave it false.
allow_root_jobs = {root_jobs}
"""


def _self_command(*args: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "xce", *args]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30,
                  context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"the controller exited with code {proc.returncode}; see the messages above")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1, context=context):
                return
        except OSError:
            time.sleep(0.1)
    fail(f"the controller did not answer on {url} within {timeout:.0f}s")


def run_embedded(state_dir: Path | None, port: int | None) -> None:
    state_dir = (state_dir or Path("~/.local/share/xce")).expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)
    config = state_dir / "xce.toml"
    admin_token_file = state_dir / "admin.token"
    port = port or DEFAULT_PORT
    first_run = not config.exists()
    if first_run:
        admin_token = secrets.token_urlsafe(32)
        worker_token = secrets.token_urlsafe(32)
        _write_private(admin_token_file, admin_token + "\n")
        _write_private(state_dir / "worker.token", worker_token + "\n")
        digest = [hashlib.sha256(t.encode()).hexdigest() for t in (admin_token, worker_token)]
        _write_private(config, _config_text(state_dir, port, *digest))
    from xce.config import load_config

    cfg = load_config(config)
    url = cfg.controllers[0]
    client_cfg = client_config_path()
    # A cluster directory made by `xce init` serves https with its own CA: the CLI needs it.
    ca_line = f'ca_file = "{cfg.tls.ca_file}"\n' if cfg.tls.ca_file else ""
    _write_private(client_cfg, f'controllers = ["{url}"]\ntoken_file = "{admin_token_file}"\n'
                   + ca_line)

    controller = subprocess.Popen(_self_command("controller", "--config", str(config)))
    procs = [controller]
    try:
        from xce.auth.pki import client_ssl_context

        _wait_healthy(url, controller, context=client_ssl_context(cfg.tls))
        procs.append(subprocess.Popen(_self_command("worker", "--config", str(config))))
        typer.echo("")
        typer.echo(f"XCE is up: controller {url}, worker {cfg.worker.name}")
        typer.echo(f"  state directory: {state_dir} (mode 0700)")
        typer.echo(f"  config:          {config}")
        if first_run:
            typer.echo(f"  admin token (shown once, also saved 0600 in {admin_token_file}):")
            typer.echo(f"    {admin_token}")
        else:
            typer.echo(f"  admin token:     in {admin_token_file}")
        typer.echo(f"  client config:   {client_cfg}")
        typer.echo("Try: xce job submit -- echo hello && xce job list && xce host list")
        typer.echo("Press Ctrl-C to stop.", err=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        dead = next(p for p in procs if p.poll() is not None)
        fail(f"a cluster process exited with code {dead.returncode}; stopping")
    except KeyboardInterrupt:
        typer.echo("stopping XCE...", err=True)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
