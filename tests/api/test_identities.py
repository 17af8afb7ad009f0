"""The per-token `Identity` memo: reused while the token verifies, never past a revocation,
a re-verification or a new role map, and bounded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from xce.api.identities import IdentityMemo
from xce.auth.runtime import AuthRuntime
from xce.auth.tokens import TokenService
from xce.core.errors import Unauthorized
from xce.core.rbac import RoleMap


@dataclass
class Runtime:
    """The two things `IdentityMemo` reads of an `AuthRuntime`."""

    tokens: TokenService
    roles: RoleMap


def _runtime(tmp_path: Path) -> Any:
    tokens = TokenService.open(tmp_path / "auth", "xce", "xce-api", 3600.0, 86400.0)
    return cast(AuthRuntime, Runtime(tokens, RoleMap()))


def test_same_identity_while_the_token_verifies(tmp_path: Path) -> None:
    runtime, memo = _runtime(tmp_path), IdentityMemo()
    token, _ = runtime.tokens.issue("alice", ("physics",), ("admin",))
    first = memo.identity(runtime, token)
    assert (first.user, first.groups, first.roles) == ("alice", ("physics",), ("admin",))
    assert first.permissions == RoleMap().permissions(("admin",))
    assert memo.identity(runtime, token) is first


def test_a_revoked_token_is_refused_at_once(tmp_path: Path) -> None:
    runtime, memo = _runtime(tmp_path), IdentityMemo()
    token, _ = runtime.tokens.issue("alice")
    other, _ = runtime.tokens.issue("bob")
    memo.identity(runtime, token)
    memo.identity(runtime, other)
    runtime.tokens.revocations.revoke("alice", at=4_000_000_000.0)  # after every iat here
    with pytest.raises(Unauthorized, match="revoked"):
        memo.identity(runtime, token)
    assert memo.identity(runtime, other).user == "bob"


def test_rebuilt_when_the_token_is_verified_afresh_or_the_roles_change(tmp_path: Path) -> None:
    runtime, memo = _runtime(tmp_path), IdentityMemo()
    token, _ = runtime.tokens.issue("alice", (), ("user",))
    first = memo.identity(runtime, token)
    runtime.tokens._verified.clear()  # the signature is checked again: new claims object
    again = memo.identity(runtime, token)
    assert again is not first and again == first
    runtime.roles = RoleMap(roles={"user": frozenset({"job:view:self"})})
    narrowed = memo.identity(runtime, token)
    assert narrowed.permissions == frozenset({"job:view:self"})


def test_bounded_oldest_first(tmp_path: Path) -> None:
    runtime, memo = _runtime(tmp_path), IdentityMemo(size=2)
    tokens = [runtime.tokens.issue(f"u{i}")[0] for i in range(3)]
    kept = [memo.identity(runtime, t) for t in tokens]
    assert len(memo._memo) == 2 and tokens[0] not in memo._memo
    assert memo.identity(runtime, tokens[2]) is kept[2]
    assert memo.identity(runtime, tokens[0]) is not kept[0]  # rebuilt, equal
    assert memo.identity(runtime, tokens[0]) == kept[0]
