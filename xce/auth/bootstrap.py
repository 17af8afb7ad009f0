"""A new cluster's first credentials, in the layout `xce up` and `xce init` share.

`ensure_credentials(cluster_dir, auth, controller_state, admin)` is the one way both make them:

* first run: `users.toml` gets the admin user (password generated, scrypt hash only, through
  the configfile backend's `UsersFile`);
* `worker.token` holds this node's worker *service* JWT, bound to its host name (subject and
  `host` claim, as joining issues them): a copy of it cannot register any other host. A
  token from before that (subject `worker`, no host) is replaced and revoked;
* the new admin password is also kept in `admin.password` (0600) until whoever started
  this shows it (`pending_password`, then `password_shown`): a start that fails after making
  the admin, before printing the password, must not lose the only copy;
* every run: the controller's signing key exists in `<controller_state>/auth` (created on first
  use by `TokenService`), and `admin.token` holds an admin JWT that is renewed when it is about
  to expire (for the same subject it was issued to).

All files are 0600 from the moment they exist; the config holds no secret.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path

import jwt

from xce.auth.backends.configfile import UsersFile
from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService
from xce.config.auth import AuthSettings
from xce.core.errors import Unauthorized

USERS_FILE = "users.toml"
ADMIN_TOKEN_FILE = "admin.token"
WORKER_TOKEN_FILE = "worker.token"
PASSWORD_FILE = "admin.password"
ADMIN_TOKEN_TTL_S = 30 * 86400.0
RENEW_BEFORE_S = 86400.0


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, 0600 from creation on (the folder is made 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def pending_password(cluster_dir: Path) -> str | None:
    """The admin password made by a start that has not shown it yet, or None."""
    try:
        return (cluster_dir / PASSWORD_FILE).read_text().strip() or None
    except OSError:  # none (the usual case), or a directory we cannot read: nothing to show
        return None


def password_shown(cluster_dir: Path) -> None:
    """The password has been printed: its only plain copy goes (the hash stays)."""
    (cluster_dir / PASSWORD_FILE).unlink(missing_ok=True)


def token_service(auth: AuthSettings, controller_state: Path) -> TokenService:
    """The controller's own token service (keys in `<controller_state>/auth`, 0700)."""
    controller_state.mkdir(parents=True, exist_ok=True, mode=0o700)
    return TokenService.open(
        key_dir(controller_state),
        auth.issuer,
        auth.audience,
        auth.token_ttl_s,
        auth.service_token_ttl_s,
    )


def _admin_subject(
    tokens: TokenService, current: str, default: str
) -> tuple[str, tuple[str, ...], bool]:
    """(subject, groups, still good) of the saved admin token; `default` when there is none."""
    try:
        claims = tokens.verify(current)
        return claims.user, claims.groups, claims.expires_at > time.time() + RENEW_BEFORE_S
    except Unauthorized:
        pass
    try:  # expired or retired: renew it for the same admin (the file is ours, 0600)
        payload = jwt.decode(current, options={"verify_signature": False})
        sub, groups = payload.get("sub"), payload.get("groups", [])
        if isinstance(sub, str) and sub and isinstance(groups, list):
            return sub, tuple(str(g) for g in groups), False
    except jwt.InvalidTokenError:
        pass
    return default, (), False


def _worker_token_good(tokens: TokenService, path: Path, host: str) -> bool:
    """Whether `path` holds a valid worker token bound to `host`, not near its expiry."""
    try:
        claims = tokens.verify(path.read_text().strip())
    except (OSError, Unauthorized):
        return False
    return claims.host == host and claims.expires_at > time.time() + RENEW_BEFORE_S


def ensure_worker_token(tokens: TokenService, path: Path, host: str) -> None:
    """This node's worker token, bound to `host` (issued like `xce token create --service
    worker HOST` and joining do). The shared, unbound token of older releases (subject
    `worker`) let any holder register any host name: it is replaced and revoked."""
    if _worker_token_good(tokens, path, host):
        return
    try:
        old = jwt.decode(path.read_text().strip(), options={"verify_signature": False})
    except (OSError, jwt.InvalidTokenError):
        old = {}
    token, _ = tokens.issue(host, (), ("worker",), "service", host=host)
    write_private(path, token + "\n")
    if old.get("sub") == "worker" and "host" not in old:
        tokens.revocations.revoke("worker")


def ensure_credentials(
    cluster_dir: Path,
    auth: AuthSettings,
    controller_state: Path,
    admin: str,
    first_run: bool,
    admin_groups: tuple[str, ...] = (),
    worker_host: str | None = None,
) -> str | None:
    """Make (first run) or refresh the cluster's credentials; returns the new admin password
    on the first run (show it once, then call `password_shown`), else None. `worker_host`
    is the name this node's worker registers as (default: the host name, as the worker)."""
    tokens = token_service(auth, controller_state)
    password = None
    if first_run:
        password = secrets.token_urlsafe(18)
        UsersFile(cluster_dir / USERS_FILE).add(
            admin, password, groups=admin_groups, roles=("admin",)
        )
        # Kept until shown: anything below (or the caller's start) may still fail.
        write_private(cluster_dir / PASSWORD_FILE, password + "\n")
    ensure_worker_token(
        tokens, cluster_dir / WORKER_TOKEN_FILE, worker_host or socket.gethostname()
    )
    admin_file = cluster_dir / ADMIN_TOKEN_FILE
    current = admin_file.read_text().strip() if admin_file.exists() else ""
    user, groups, good = _admin_subject(tokens, current, admin)
    if not good:
        token, _ = tokens.issue(user, groups or admin_groups, ("admin",), ttl_s=ADMIN_TOKEN_TTL_S)
        write_private(admin_file, token + "\n")
    return password
