"""`xce init DIR`: a new cluster directory with everything a first controller needs.

What it promises:
* DIR is created 0700 (an existing DIR must not hold a cluster config yet: init never
  overwrites a cluster's secrets); every secret in it is 0600 from the moment it exists;
* `xce.toml`: the commented config (xce/setup/xce.toml.in) with the candidate list
  (https:// on every --host), the listener, queues, the worker section and `[tls]`;
  it validates with the same `parse_config` the daemons use before init reports success;
* `tls/`: a cluster CA and the controller's certificate (SANs: every --host plus localhost,
  also valid as a client certificate so the worker on this node can use it for mTLS);
* the credentials, made exactly as `xce up` makes them (`xce.auth.bootstrap`): `users.toml`
  (the configfile login backend) with the admin user (the account running init unless
  `admin` names another; group `admins`) and a generated password (scrypt hash
  only; the password is returned to be printed once), the controller's token signing key in
  `controller/auth/`, `admin.token` (an admin JWT, 30 days) and `worker.token` (a worker
  service JWT); `client.toml` for the CLI (`XCE_CLIENT_CONFIG=DIR/client.toml`);
* `systemd/`: the three units rendered for this binary and DIR;
* one worker join token (24 h) in the controller's state, for `xce init --join`.

The layout is also what `xce up --state-dir DIR` expects, so `xce up` runs the new cluster.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import shutil
import socket
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from xce.auth.bootstrap import ADMIN_TOKEN_FILE, ensure_credentials
from xce.config.auth import parse_auth
from xce.config.loader import parse_config
from xce.config.settings import DEFAULT_PORT
from xce.core.errors import ConfigError, InvalidRequest
from xce.setup.files import private_dir, write_private
from xce.setup.jointokens import IssuedToken, JoinTokenStore
from xce.setup.templates import UNITS, render_config, render_unit

CONFIG_FILE = "xce.toml"
CONTROLLER_STATE = "controller"
ADMIN_GROUPS = ("admins",)


@dataclass(frozen=True)
class InitResult:
    cluster_dir: Path
    config: Path
    controllers: tuple[str, ...]
    admin_user: str
    admin_password: str
    admin_token_file: Path
    client_config: Path
    join_token: IssuedToken
    ca_sha256: str
    units: tuple[Path, ...]


def executable() -> str:
    """What the systemd units should run: the AppImage, the frozen binary, or `xce`.

    An AppImage is named as itself, so its units need FUSE on the node. Not
    `--appimage-extract-and-run`: every run of one AppImage shares one extraction directory,
    and the first daemon to stop would delete it under the others. Without FUSE, extract it
    once (`--appimage-extract`) and run `init` from that AppRun: then sys.executable is it."""
    if os.environ.get("APPIMAGE"):
        return os.environ["APPIMAGE"]
    if getattr(sys, "frozen", False):
        return sys.executable
    # -P as for every child XCE starts: a folder named xce in the cwd must not shadow it
    return shutil.which("xce") or f"{sys.executable} -P -m xce"


def _url_host(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def check_new_dir(cluster_dir: Path) -> None:
    if (cluster_dir / CONFIG_FILE).exists():
        raise InvalidRequest(
            f"{cluster_dir / CONFIG_FILE} exists: {cluster_dir} already holds "
            "a cluster (init never overwrites one)"
        )
    if cluster_dir.exists() and not cluster_dir.is_dir():
        raise InvalidRequest(f"{cluster_dir} exists and is not a directory")


def _ca_sha256(ca_pem: Path) -> str:
    import ssl

    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(ca_pem.read_text())).hexdigest()


def init_cluster(
    cluster_dir: Path,
    hosts: list[str],
    port: int = DEFAULT_PORT,
    listen: str = "0.0.0.0",
    allow_root_jobs: bool = False,
    admin: str | None = None,
) -> InitResult:
    """Create the cluster directory; raises InvalidRequest/ConfigError naming the problem.

    `admin` (default: the account running init, as with `xce up`) is the first admin's
    login name; jobs it submits run as the OS account of that name, so it should exist."""
    import getpass

    from xce.auth.pki import create_ca, issue_certificate

    cluster_dir = cluster_dir.expanduser().resolve()
    check_new_dir(cluster_dir)
    if not hosts:
        raise InvalidRequest("init needs at least one controller host (--host)")
    if not 0 < port < 65536:
        raise InvalidRequest(f"--port must be 1..65535, got {port}")
    private_dir(cluster_dir)
    tls_dir = private_dir(cluster_dir / "tls")
    ca = create_ca(tls_dir, "XCE cluster CA")
    sans = list(dict.fromkeys([*hosts, "localhost", "127.0.0.1"]))
    issue_certificate(ca, tls_dir, "controller", sans, client=True)

    controllers = tuple(f"https://{_url_host(h)}:{port}" for h in hosts)
    text = render_config(
        created=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        cluster_dir=str(cluster_dir),
        controllers=", ".join(f'"{u}"' for u in controllers),
        listen=f"{_url_host(listen)}:{port}",
        node_cert="controller",
        allow_root_jobs="true" if allow_root_jobs else "false",
    )
    config = cluster_dir / CONFIG_FILE
    data = tomllib.loads(text)
    # The credentials first (the full config names worker.token, which must exist to load):
    # the admin user in users.toml, the controller's signing key, admin.token, worker.token.
    auth = parse_auth(data["auth"], cluster_dir)
    state = private_dir(cluster_dir / data["controller"]["state_dir"])
    admin = admin or getpass.getuser()
    password = ensure_credentials(
        cluster_dir,
        auth,
        state,
        admin,
        first_run=True,
        admin_groups=ADMIN_GROUPS,
        worker_host=data.get("worker", {}).get("name"),
    )
    try:  # the daemons' own validation, before anything says "done"
        parse_config(data, config)
    except ConfigError as exc:
        raise ConfigError(f"the generated config does not validate: {exc.message}") from None
    write_private(config, text)
    client_config = cluster_dir / "client.toml"
    write_private(
        client_config,
        (
            "# CLI settings for this cluster: export XCE_CLIENT_CONFIG=" + str(client_config) + "\n"
            f"controllers = [{', '.join(repr(u).replace(chr(39), chr(34)) for u in controllers)}]\n"
            f'token_file = "{cluster_dir / ADMIN_TOKEN_FILE}"\n'
            f'ca_file = "{tls_dir / "ca.pem"}"\n'
        ),
    )

    assert password is not None  # first_run=True always makes the admin's password
    join_token = JoinTokenStore(state).create("worker")
    units_dir = private_dir(cluster_dir / "systemd")
    units = []
    for name in UNITS:
        unit = units_dir / name
        write_private(unit, render_unit(name, executable(), config, cluster_dir))
        units.append(unit)
    return InitResult(
        cluster_dir,
        config,
        controllers,
        admin,
        password,
        cluster_dir / ADMIN_TOKEN_FILE,
        client_config,
        join_token,
        _ca_sha256(tls_dir / "ca.pem"),
        tuple(units),
    )


def default_hosts() -> list[str]:
    """This machine's fully qualified name: what other nodes will most likely reach."""
    return [socket.getfqdn()]
