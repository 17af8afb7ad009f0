"""`xce up`: the embedded default cluster, a controller and one worker on this machine.

The first run creates the state directory (0700), a config, a users file with an admin user
named after you and a random password (printed once), the controller's token signing key, an
admin token for the CLI and a worker service token (0600 files; the config holds neither), and
writes the client config so `xce job ...` in another shell finds the cluster. Later runs reuse
all of it (renewing the admin token when it is about to expire). The two roles run as child
processes, exactly as on a real cluster.
"""

from __future__ import annotations

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


ADMIN_TOKEN_TTL_S = 30 * 86400.0


def admin_name() -> str:
    """The embedded cluster's admin is you: jobs you submit run as your own account."""
    import getpass

    return getpass.getuser()


def _config_text(state_dir: Path, port: int) -> str:
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
# Logins get a signed JWT (keys in the controller's state directory). Roles: user,
# group-admin, operator, admin; map groups to roles under [auth.groups].
token_ttl_s = 43200

[[auth.backend]]
# Users, groups and password hashes; edit with `xce user add|passwd|list|del`.
type = "configfile"
path = "{state_dir / 'users.toml'}"

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


def _credentials(state_dir: Path, config: Path, first_run: bool) -> str | None:
    """Make the admin user (first run) and the token files; returns the new password.

    Runs before the whole config is loaded (which needs the worker's token file), so only
    `[auth]` is read here; the controller's state directory is the one `xce up` writes."""
    import time
    import tomllib

    from xce.auth.backends.configfile import UsersFile
    from xce.auth.keys import key_dir
    from xce.auth.settings import parse_auth
    from xce.auth.tokens import TokenService
    from xce.core.errors import XceError

    try:
        auth = parse_auth(tomllib.loads(config.read_text()).get("auth", {}), config.parent)
    except (OSError, tomllib.TOMLDecodeError, XceError) as exc:
        fail(f"cannot read the auth section of {config}: {exc}")
    controller_dir = state_dir / "controller"
    controller_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tokens = TokenService.open(key_dir(controller_dir), auth.issuer, auth.audience,
                               auth.token_ttl_s, auth.service_token_ttl_s)
    password = None
    if first_run:
        password = secrets.token_urlsafe(12)
        UsersFile(state_dir / "users.toml").add(admin_name(), password, roles=("admin",))
        worker_token, _ = tokens.issue("worker", (), ("worker",), "service")
        _write_private(state_dir / "worker.token", worker_token + "\n")
    admin_file = state_dir / "admin.token"
    current = admin_file.read_text().strip() if admin_file.exists() else ""
    try:
        renew = tokens.verify(current).expires_at < time.time() + 86400
    except Exception:
        renew = True
    if renew:
        token, _ = tokens.issue(admin_name(), (), ("admin",), ttl_s=ADMIN_TOKEN_TTL_S)
        _write_private(admin_file, token + "\n")
    return password


def run_embedded(state_dir: Path | None, port: int | None) -> None:
    state_dir = (state_dir or Path("~/.local/share/xce")).expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)
    config = state_dir / "xce.toml"
    admin_token_file = state_dir / "admin.token"
    port = port or DEFAULT_PORT
    first_run = not config.exists()
    if first_run:
        _write_private(config, _config_text(state_dir, port))
    password = _credentials(state_dir, config, first_run)
    from xce.config import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(exc.message)
    admin_token = admin_token_file.read_text().strip()
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
        if password is not None:
            typer.echo(f"  admin login (shown once): user {admin_name()}, password {password}")
            typer.echo(f"    users file: {state_dir / 'users.toml'} (xce user add|passwd)")
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
