"""XCE's own JWTs: issued after a login (any backend) or as service tokens, verified on every
request.

Promises of `TokenService.verify`:
- the algorithm is pinned to EdDSA (Ed25519): `alg: none`, HS256 (also HS256 "signed" with
  the public key, the classic confusion) and every other algorithm are refused;
- `exp`, `nbf`, `iat`, `iss`, `aud`, `sub` and the `kid` header are required and checked
  (a small leeway absorbs clock skew between controllers);
- the key is found by `kid`; after a rotation the old key verifies until its tokens expire;
- a token issued before its subject's revocation time ("not before", see `Revocations`) is
  refused.

Revocation is a small durable file beside the keys, not a WAL event: it is security state that
does not change the schedule, it must work before the WAL is replayed, and it travels with the
signing keys (a standby that takes over needs the key folder anyway). The file is rewritten
atomically (temp + fsync + rename + folder fsync).
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from xce.auth.files import atomic_write
from xce.auth.keys import KeyStore
from xce.core.errors import Unauthorized

ALGORITHM = "EdDSA"
LEEWAY_S = 30
REQUIRED = ["exp", "nbf", "iat", "iss", "aud", "sub"]
CACHE_SIZE = 4096


@dataclass(frozen=True)
class Claims:
    """What a verified token says: who, their groups and roles, and what kind of token."""

    user: str
    groups: tuple[str, ...]
    roles: tuple[str, ...]
    kind: str  # "user" (after a login) or "service" (workers, standbys)
    issued_at: float
    expires_at: float
    kid: str
    not_before: float = 0.0
    host: str | None = None  # a worker token bound to this host name


class Revocations:
    """A durable per-subject "not before": tokens issued earlier are refused."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.not_before: dict[str, float] = {}
        if path.exists():
            self.not_before = {str(k): float(v) for k, v in json.loads(path.read_text()).items()}

    def revoke(self, subject: str, at: float | None = None) -> float:
        when = round(time.time() if at is None else at, 3)  # same precision as iat
        self.not_before[subject] = when
        atomic_write(self.path, json.dumps(self.not_before, indent=1).encode())
        return when

    def revoked(self, subject: str, issued_at: float) -> bool:
        cutoff = self.not_before.get(subject)
        return cutoff is not None and issued_at < cutoff


class TokenService:
    def __init__(
        self,
        keys: KeyStore,
        revocations: Revocations,
        issuer: str,
        audience: str,
        ttl_s: float,
        service_ttl_s: float,
    ) -> None:
        self.keys = keys
        self.revocations = revocations
        self.issuer = issuer
        self.audience = audience
        self.ttl_s = ttl_s
        self.service_ttl_s = service_ttl_s
        # Token text -> claims of tokens whose signature already checked out. A clients sends
        # the same token with every request; a hit re-checks only time, key and revocation.
        self._verified: OrderedDict[str, Claims] = OrderedDict()

    @classmethod
    def open(
        cls, directory: Path, issuer: str, audience: str, ttl_s: float, service_ttl_s: float
    ) -> TokenService:
        """The token service of the state folder `directory` (keys created on first use)."""
        keys = KeyStore(directory, max(ttl_s, service_ttl_s))
        return cls(
            keys,
            Revocations(directory / "revocations.json"),
            issuer,
            audience,
            ttl_s,
            service_ttl_s,
        )

    def issue(
        self,
        user: str,
        groups: tuple[str, ...] = (),
        roles: tuple[str, ...] = (),
        kind: str = "user",
        ttl_s: float | None = None,
        now: float | None = None,
        host: str | None = None,
    ) -> tuple[str, float]:
        """A signed token and its expiry time (seconds since the epoch).

        `host` binds a worker's service token to one host name: the worker routes then
        refuse it for any other host, so a stolen node token cannot impersonate the rest."""
        if kind not in ("user", "service"):
            raise ValueError(f"unknown token kind {kind!r}")
        issued = time.time() if now is None else now
        lifetime = ttl_s or (self.service_ttl_s if kind == "service" else self.ttl_s)
        expires = int(issued + lifetime)
        key = self.keys.current
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": user,
            "iat": round(issued, 3),
            "nbf": int(issued),
            "exp": expires,
            "jti": secrets.token_hex(8),
            "groups": list(groups),
            "roles": list(roles),
            "typ": kind,
        }
        if host is not None:
            payload["host"] = host
        token = jwt.encode(payload, key.private, algorithm=ALGORITHM, headers={"kid": key.kid})
        return token, float(expires)

    def verify(self, token: str) -> Claims:
        """The claims of a valid token; raises `Unauthorized` saying what is wrong."""
        known = self._verified.get(token)
        if known is not None:
            now = time.time()
            if (
                known.not_before - LEEWAY_S <= now < known.expires_at + LEEWAY_S
                and self.keys.get(known.kid) is not None
            ):
                self._verified.move_to_end(token)
                if self.revocations.revoked(known.user, known.issued_at):
                    raise Unauthorized(f"the tokens of {known.user} were revoked; log in again")
                return known
            del self._verified[token]  # stale: the full check below says exactly why
        claims = self._verify_fully(token)
        self._verified[token] = claims
        if len(self._verified) > CACHE_SIZE:
            self._verified.popitem(last=False)
        return claims

    def _verify_fully(self, token: str) -> Claims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized("the bearer token is not a valid token") from None
        if header.get("alg") != ALGORITHM:
            raise Unauthorized(
                f"the bearer token's algorithm {header.get('alg')!r} is not "
                f"accepted (only {ALGORITHM})"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or (key := self.keys.get(kid)) is None:
            raise Unauthorized("the bearer token was signed with an unknown or retired key")
        try:
            payload = jwt.decode(
                token,
                key.public,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": REQUIRED, "verify_signature": True},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the bearer token has expired (run xce login)") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("the bearer token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the bearer token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("the bearer token is from another issuer") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the bearer token is not valid: {exc}") from None
        return self._claims(payload, kid)

    def _claims(self, payload: dict[str, Any], kid: str) -> Claims:
        sub, iat = payload["sub"], payload["iat"]
        groups, roles = payload.get("groups", []), payload.get("roles", [])
        kind = payload.get("typ", "user")
        host = payload.get("host")
        if not (
            isinstance(sub, str)
            and sub
            and isinstance(iat, (int, float))
            and (host is None or (isinstance(host, str) and host))
            and isinstance(groups, list)
            and isinstance(roles, list)
            and all(isinstance(x, str) for x in [*groups, *roles])
            and kind in ("user", "service")
        ):
            raise Unauthorized("the bearer token's claims are malformed")
        if self.revocations.revoked(sub, float(iat)):
            raise Unauthorized(f"the tokens of {sub} were revoked; log in again")
        return Claims(
            sub,
            tuple(groups),
            tuple(roles),
            kind,
            float(iat),
            float(payload["exp"]),
            kid,
            float(payload["nbf"]),
            host,
        )
