"""A new cluster's first credentials, in the layout `xce up` and `xce init` share.

`ensure_credentials(cluster_dir, auth, controller_state, admin)` is the one way both make them:

* first run: `users.toml` gets the admin user (password generated, scrypt hash only, through
  the configfile backend's `UsersFile`), and `worker.token` a worker *service* JWT;
* every run: the controller's signing key exists in `<controller_state>/auth` (created on first
  use by `TokenService`), and `admin.token` holds an admin JWT that is renewed when it is about
  to expire (for the same subject it was issued to).

All files are 0600 from the moment they exist; the config holds no secret.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import jwt

from xce.auth.backends.configfile import UsersFile
from xce.auth.keys import key_dir
from xce.auth.settings import AuthSettings
from xce.auth.tokens import TokenService
from xce.core.errors import Unauthorized

USERS_FILE = "users.toml"
ADMIN_TOKEN_FILE = "admin.token"
WORKER_TOKEN_FILE = "worker.token"
ADMIN_TOKEN_TTL_S = 30 * 86400.0
RENEW_BEFORE_S = 86400.0


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, 0600 from creation on (the folder is made 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def token_service(auth: AuthSettings, controller_state: Path) -> TokenService:
    """The controller's own token service (keys in `<controller_state>/auth`, 0700)."""
    controller_state.mkdir(parents=True, exist_ok=True, mode=0o700)
    return TokenService.open(key_dir(controller_state), auth.issuer, auth.audience,
                             auth.token_ttl_s, auth.service_token_ttl_s)


def _admin_subject(tokens: TokenService, current: str, default: str
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


def ensure_credentials(cluster_dir: Path, auth: AuthSettings, controller_state: Path,
                       admin: str, first_run: bool, admin_groups: tuple[str, ...] = (),
                       ) -> str | None:
    """Make (first run) or refresh the cluster's credentials; returns the new admin password
    on the first run (show it once), else None."""
    tokens = token_service(auth, controller_state)
    password = None
    if first_run:
        password = secrets.token_urlsafe(18)
        UsersFile(cluster_dir / USERS_FILE).add(admin, password, groups=admin_groups,
                                               roles=("admin",))
        worker_token, _ = tokens.issue("worker", (), ("worker",), "service")
        write_private(cluster_dir / WORKER_TOKEN_FILE, worker_token + "\n")
    admin_file = cluster_dir / ADMIN_TOKEN_FILE
    current = admin_file.read_text().strip() if admin_file.exists() else ""
    user, groups, good = _admin_subject(tokens, current, admin)
    if not good:
        token, _ = tokens.issue(user, groups or admin_groups, ("admin",),
                                ttl_s=ADMIN_TOKEN_TTL_S)
        write_private(admin_file, token + "\n")
    return password
