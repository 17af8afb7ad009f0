"""The cluster's first administrator: a generated password, stored only as a scrypt hash.

`create_admin(cluster_dir)` is the one call `xce init` makes. It writes `users.toml` (0600)
in the layout of the `configfile` login backend that the auth issue builds
(xce/auth/backends/configfile.py on branch `auth`):

    [users.admin]
    password = "scrypt$<log2 N>$<r>$<p>$<salt b64>$<hash b64>"
    groups = ["admins"]
    roles = ["admin"]

with N = 2**15, r = 8, p = 1 and a 32-byte key, the parameters of auth's
`xce.auth.passwords.hash_password`, so either side can verify the other's hashes. When that
module is importable this function should call it instead (one line): until the branches
meet, this is the contract.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

USERS_FILE = "users.toml"
LOG2_N, R, P, KEY_LEN = 15, 8, 1, 32


def hash_password(password: str, log2_n: int = LOG2_N) -> str:
    """`scrypt$log2N$r$p$salt$hash`, salt and hash in standard base64."""
    salt = os.urandom(16)
    n = 1 << log2_n
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=R, p=P, dklen=KEY_LEN,
                            maxmem=128 * R * n * 2 + (1 << 20))
    b64 = base64.b64encode
    return f"scrypt${log2_n}${R}${P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    """True when `password` matches a hash written by `hash_password`."""
    scheme, log2_n, r, p, salt, digest = encoded.split("$")
    n = 1 << int(log2_n)
    got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=n, r=int(r),
                         p=int(p), dklen=KEY_LEN, maxmem=128 * int(r) * n * 2 + (1 << 20))
    return scheme == "scrypt" and secrets.compare_digest(got, base64.b64decode(digest))


def create_admin(cluster_dir: Path, name: str = "admin") -> str:
    """Write users.toml with the admin user; returns the generated password (show it once)."""
    password = secrets.token_urlsafe(18)
    text = (
        "# XCE users (the configfile login backend). Passwords are scrypt hashes only.\n"
        "# Change one with `xce user passwd NAME` once the login API is enabled.\n"
        f"[users.{name}]\n"
        f'password = "{hash_password(password)}"\n'
        'groups = ["admins"]\n'
        'roles = ["admin"]\n'
    )
    path = cluster_dir / USERS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return password
