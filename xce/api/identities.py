"""The `Identity` of each bearer token, built once and reused while its token verifies.

A client sends the same token with every request. `TokenService.verify` already remembers
the claims of a token whose signature checked out and, on every request, re-checks its
times, its signing key and its subject's revocation (so a revoked token, or one of a user
whose password changed, is refused at once). What was left per request was building the
`Identity`: a frozen dataclass and the permission set of its roles, ~2-3 us. This memo keeps
that `Identity` beside the exact `Claims` object it was built from and the role map that
granted its permissions: a hit needs `verify` to have returned that same object (a token
verified afresh yields a new one) under the same role map, so nothing it remembers can
outlive what `verify` still vouches for.
"""

from __future__ import annotations

from aiohttp import web

from xce.api.http import Identity
from xce.auth.runtime import AuthRuntime
from xce.auth.tokens import CACHE_SIZE, Claims
from xce.core.rbac import RoleMap


class IdentityMemo:
    """Token text -> (claims, role map, identity); at most `size` tokens, oldest dropped
    first, so a flood of distinct tokens only churns it."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._memo: dict[str, tuple[Claims, RoleMap, Identity]] = {}

    def identity(self, runtime: AuthRuntime, token: str) -> Identity:
        """The caller's identity; raises `Unauthorized` as `TokenService.verify` does."""
        claims = runtime.tokens.verify(token)  # every request: times, key, revocation
        roles = runtime.roles
        hit = self._memo.get(token)
        if hit is not None and hit[0] is claims and hit[1] is roles:
            return hit[2]
        who = Identity(
            claims.user,
            claims.groups,
            claims.roles,
            roles.permissions(claims.roles),
            claims.kind,
            claims.host,
            claims.issued_at,
            claims.expires_at,
        )
        self._memo.pop(token, None)  # re-insert at the end: the oldest go first
        self._memo[token] = (claims, roles, who)
        if len(self._memo) > self.size:
            del self._memo[next(iter(self._memo))]
        return who


IDENTITIES = web.AppKey("identities", IdentityMemo)
