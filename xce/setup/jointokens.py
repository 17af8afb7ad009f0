"""One-time join tokens: a new worker or standby trades one for the cluster CA and its config.

Promises:
* only a SHA-256 of each token's secret is stored (`<state_dir>/join/tokens.json`, 0600 in a
  0700 folder), so reading the state directory does not let anyone join;
* a token works once: `redeem` marks it used and writes that durably (temp file, fsync,
  rename, fsync of the folder) *before* it returns, so a crash right after cannot let the
  same token in twice; an exclusive flock serialises `xce init` and a running controller;
* a token expires (`expires_at`, default 24 h), and is tied to one role (worker | standby).

Token text: `xcej_<id>.<secret>`: the id finds the record, the secret is compared in
constant time. Expired and used records are pruned whenever the file is rewritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from xce.core.errors import InvalidRequest, Unauthorized
from xce.protocol.auth import MAX_TTL_S, JoinRole

ROLES: tuple[str, ...] = get_args(JoinRole)
DEFAULT_TTL_S = 24 * 3600.0
PREFIX = "xcej_"


class JoinTokenRefused(Unauthorized):
    """The token is unknown, already used or expired (the message says which)."""

    code = "join_token_refused"


@dataclass(frozen=True)
class IssuedToken:
    token: str
    role: str
    expires_at: float


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _split(token: str) -> tuple[str, str]:
    body = token.strip()
    if not body.startswith(PREFIX) or "." not in body:
        raise JoinTokenRefused("not a join token (expected xcej_<id>.<secret>)")
    token_id, _, secret = body[len(PREFIX) :].partition(".")
    if not token_id or not secret:
        raise JoinTokenRefused("not a join token (expected xcej_<id>.<secret>)")
    return token_id, secret


class JoinTokenStore:
    """The join tokens of one controller, kept in `<state_dir>/join/tokens.json`."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir) / "join"
        self.path = self.dir / "tokens.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The token records under an exclusive lock; changes are written back on exit."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.dir.chmod(0o700)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            records = json.loads(self.path.read_text()) if self.path.exists() else {}
            before = json.dumps(records, sort_keys=True)
            yield records
            if json.dumps(records, sort_keys=True) != before:
                self._write(records)
        finally:
            os.close(fd)

    def _write(self, records: dict[str, dict[str, Any]]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".tokens.", dir=self.dir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(records, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def create(
        self, role: str, ttl_s: float = DEFAULT_TTL_S, now: float | None = None
    ) -> IssuedToken:
        """A new single-use token for `role`; only its digest is stored."""
        if role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not 0 < ttl_s <= MAX_TTL_S:
            raise InvalidRequest(f"ttl_s must be between 1 and {MAX_TTL_S:.0f} seconds")
        now = time.time() if now is None else now
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(24)
        with self._locked() as records:
            self._prune(records, now)
            records[token_id] = {
                "sha256": _digest(secret),
                "role": role,
                "created_at": now,
                "expires_at": now + ttl_s,
                "used_at": None,
            }
        return IssuedToken(f"{PREFIX}{token_id}.{secret}", role, now + ttl_s)

    def redeem(self, token: str, now: float | None = None) -> str:
        """Use `token` up; returns its role. Raises JoinTokenRefused saying why not."""
        token_id, secret = _split(token)
        now = time.time() if now is None else now
        with self._locked() as records:
            record = records.get(token_id)
            if record is None or not hmac.compare_digest(record["sha256"], _digest(secret)):
                raise JoinTokenRefused("unknown join token")
            if record["used_at"] is not None:
                raise JoinTokenRefused(
                    "this join token was already used; create a new one with `xce token join`"
                )
            if record["expires_at"] <= now:
                raise JoinTokenRefused(
                    "this join token has expired; create a new one with `xce token join`"
                )
            record["used_at"] = now
        return str(record["role"])

    @staticmethod
    def _prune(records: dict[str, dict[str, Any]], now: float) -> None:
        """Drop records that can never be redeemed again (used ones kept a day for audit)."""
        for token_id in list(records):
            r = records[token_id]
            used = r["used_at"] is not None and r["used_at"] < now - 86400
            if used or r["expires_at"] < now - 86400:
                del records[token_id]
