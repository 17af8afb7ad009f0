"""`xce up`: the embedded default cluster, a controller and one worker on this machine.

The first run creates the state directory (0700), a config, a users file with an admin user
named after you and a random password (printed once; kept in a 0600 file until a start has
printed it), the controller's token signing key, an admin token for the CLI and a worker
service token (0600 files; the config holds neither), and writes the client config so
`xce job ...` in another shell finds the cluster. Later runs reuse all of it (renewing the
admin token when it is about to expire). The two roles run as child processes, exactly as on
a real cluster, started so that the working directory cannot shadow the package.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import typer

from xce.auth.bootstrap import (
    PASSWORD_FILE,
    USERS_FILE,
    password_shown,
    pending_password,
)
from xce.auth.bootstrap import write_private as _write_private
from xce.cli.common import client_config_path, fail
from xce.config.settings import DEFAULT_PORT


def admin_name() -> str:
    """The embedded cluster's admin is you: jobs you submit run as your own account."""
    import getpass

    return getpass.getuser()


def _local_socket_line() -> str:
    """Started as root, the embedded controller also listens on /run/xce/xce.sock (or
    `XCE_SOCKET`, where the clients look too), where every local user is who the kernel
    says (no account, no password): unless another controller holds it already."""
    if os.geteuid() != 0:
        return ""
    from xce.server.local_socket import listening

    path = Path(os.environ.get("XCE_SOCKET") or "/run/xce/xce.sock")
    if path.exists() and listening(path):
        return ""
    return (
        "# Local users need no login here: the kernel names them on this socket.\n"
        f'local_socket = "{path}"\n'
    )


def _config_text(state_dir: Path, port: int) -> str:
    root_jobs = "true" if os.geteuid() == 0 else "false"
    socket_line = _local_socket_line()
    return f"""# XCE embedded cluster, written by `xce up`. Edit and restart `xce up` to change it.
[cluster]
# Ordered controller candidates; clients and workers try them in this order.
controllers = ["http://127.0.0.1:{port}"]

[controller]
listen = "127.0.0.1:{port}"
state_dir = "{state_dir / "controller"}"
heartbeat_interval_s = 2.0
missed_heartbeats = 3
{socket_line}# Jobs of root are accepted only where this is true (set because `xce up` ran as root,
# as for the worker below); jobs of other system accounts (uid < min_job_uid, 1000) are refused.
allow_root_jobs = {root_jobs}

[auth]
# Logins get a signed JWT (keys in the controller's state directory). Roles: user,
# group-admin, operator, admin; map groups to roles under [auth.groups].
token_ttl_s = 43200

[[auth.backend]]
# Users, groups and password hashes; edit with `xce user add|passwd|list|del`.
type = "configfile"
path = "{state_dir / "users.toml"}"

[[queue]]
name = "normal"
priority = 30
description = "default queue"

[[queue]]
name = "short"
priority = 40
description = "short jobs, dispatched first"

[worker]
spool_dir = "{state_dir / "worker"}"
token_file = "{state_dir / "worker.token"}"
heartbeat_interval_s = 2.0
# Jobs submitted by root run as root only where this is true (set because `xce up` ran as
# root); a multi-user cluster should leave it false.
allow_root_jobs = {root_jobs}
"""


def _upgrade_config(config: Path) -> None:
    """A config an older `xce up` wrote as root allowed root jobs on the worker only; the
    controller now checks too (`[controller] allow_root_jobs`), so say the same there."""
    import tomllib

    try:
        text = config.read_text()
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError):
        return  # loading the config reports it
    controller = data.get("controller", {})
    if (
        os.geteuid() != 0
        or "allow_root_jobs" in controller
        or data.get("worker", {}).get("allow_root_jobs") is not True
        or text.count("\n[controller]\n") != 1
    ):
        return
    line = (
        "# Added by `xce up`: root jobs, as the worker below allows them.\nallow_root_jobs = true\n"
    )
    _write_private(config, text.replace("\n[controller]\n", "\n[controller]\n" + line, 1))
    typer.echo(f"xce up: added allow_root_jobs = true to [controller] in {config}", err=True)


def _self_command(*args: str) -> list[str]:
    """This `xce` for a child role: the frozen binary runs itself; from Python the package
    runs with -P, so a folder named `xce` in the working directory cannot shadow it."""
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    from xce.core.selfexec import python_module

    return [*python_module("xce"), *args]


def _wait_healthy(
    url: str,
    proc: subprocess.Popen[bytes],
    timeout: float = 30,
    context: ssl.SSLContext | None = None,
) -> None:
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
    `[auth]` and `[controller] state_dir` are read here."""
    import tomllib

    from xce.auth.bootstrap import ensure_credentials
    from xce.config.auth import parse_auth
    from xce.core.errors import XceError

    try:
        data = tomllib.loads(config.read_text())
        auth = parse_auth(data.get("auth", {}), config.parent)
    except (OSError, tomllib.TOMLDecodeError, XceError) as exc:
        fail(f"cannot read the auth section of {config}: {exc}")
    raw_state = data.get("controller", {}).get("state_dir", "controller")
    controller_dir = (config.parent / Path(str(raw_state)).expanduser()).resolve()
    try:
        worker = data.get("worker", {}).get("name")  # the host name unless the config says
        return ensure_credentials(
            state_dir,
            auth,
            controller_dir,
            admin_name(),
            first_run,
            worker_host=worker if isinstance(worker, str) else None,
        )
    except XceError as exc:
        fail(exc.message)


def run_embedded(state_dir: Path | None, port: int | None) -> None:
    """`xce up`. Whatever fails at start is one line on stderr: an expected failure says
    what, an unexpected one also names the log that keeps its traceback
    (`<state dir>/up-error.log`). A new admin password that no start has shown yet stays in
    `admin.password` (0600), and the failure says so: the next start prints it."""
    from xce.core.errors import XceError

    state_dir = (state_dir or Path("~/.local/share/xce")).expanduser().resolve()
    try:
        try:
            _start(state_dir, port or DEFAULT_PORT)
        except typer.Exit:
            raise
        except XceError as exc:
            fail(exc.message)
        except OSError as exc:
            fail(f"cannot start XCE in {state_dir}: {exc}")
        except Exception as exc:
            from xce.cli.crash import crashed

            crashed("up", exc, [state_dir])
        except KeyboardInterrupt:  # Ctrl-C before the cluster was up (after: handled there)
            fail("interrupted", 130)
    except typer.Exit as exc:
        if exc.exit_code and pending_password(state_dir) is not None:
            typer.echo(
                f"xce up: the new admin password is kept in {state_dir / PASSWORD_FILE} "
                "(mode 0600) until `xce up` starts and shows it",
                err=True,
            )
        raise


def _start(state_dir: Path, port: int) -> None:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)
    config = state_dir / "xce.toml"
    admin_token_file = state_dir / "admin.token"
    first_run = not config.exists()
    if first_run:
        _write_private(config, _config_text(state_dir, port))
    if not first_run:
        from xce.config.file_safety import check_config

        check_config(config)  # before it is changed or believed: as the roles check it
        _upgrade_config(config)
    # The admin is made with users.toml: a first start that failed before making it (the
    # config was already written) makes it now rather than never.
    _credentials(state_dir, config, first_run or not (state_dir / USERS_FILE).exists())
    password = pending_password(state_dir)  # this start's, or one a failed start kept
    from xce.config.loader import load_config
    from xce.core.errors import ConfigError

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(exc.message)
    admin_token = admin_token_file.read_text().strip()
    url = cfg.controllers[0]
    client_cfg = client_config_path()
    # A cluster directory made by `xce init` serves https with its own CA: the CLI needs it.
    ca_line = f'ca_file = "{cfg.tls.ca_file}"\n' if cfg.tls.ca_file else ""
    _write_private(
        client_cfg, f'controllers = ["{url}"]\ntoken_file = "{admin_token_file}"\n' + ca_line
    )

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
            password_shown(state_dir)
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
