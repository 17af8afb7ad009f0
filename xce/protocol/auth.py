"""Request bodies of the login, token and join routes, each declared once as a msgspec
Struct (see xce/protocol/bodies.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from xce.protocol.bodies import Body

# The roles a join token may grant (the join body's type, and the token store's list) and
# the longest life an admin may give one.
JoinRole = Literal["worker", "standby"]
MAX_TTL_S = 30 * 24 * 3600.0

User = Annotated[str, Meta(min_length=1, max_length=256)]
Secret = Annotated[str, Meta(min_length=1, max_length=4096)]


class Login(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/login` (the guard reads `username` first, for its throttle)."""

    username: User
    password: Secret


class MungeLogin(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/munge`: a MUNGE credential made for this cluster. The length is
    bounded here; its shape (one line of base64) is checked before munged sees it."""

    credential: Annotated[str, Meta(min_length=1, max_length=4096)]


class DeviceToken(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/device/token`: a device flow's poll (RFC 8628)."""

    device_code: Secret


class ServiceToken(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/tokens`: a token for a worker (bound to its host) or a
    standby."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    role: Literal["worker", "standby"]
    ttl_s: Annotated[int, Meta(ge=60, le=10 * 365 * 86400)] | None = None  # None: the default


class Revoke(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/revoke`: every token of `user` issued until now stops working."""

    user: User


class Authorize(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/authorize`: start an OIDC login back to a loopback URI."""

    redirect_uri: Annotated[str, Meta(min_length=1, max_length=2048)]


class Code(Body, frozen=True, kw_only=True):
    """`POST /api/v1/auth/code`: the code the identity provider sent back."""

    state: User
    code: Secret


class Join(Body, frozen=True, kw_only=True):
    """`POST /api/v1/join`: a new node redeems a join token for its certificate."""

    token: Annotated[str, Meta(min_length=1, max_length=200)]
    name: Annotated[str, Meta(pattern="^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    hosts: Annotated[
        tuple[Annotated[str, Meta(min_length=1, max_length=253)], ...], Meta(max_length=16)
    ] = ()


class JoinToken(Body, frozen=True, kw_only=True):
    """`POST /api/v1/join/tokens`: a join token for a worker or a standby."""

    role: JoinRole
    ttl_s: Annotated[float, Meta(ge=1, le=MAX_TTL_S)] | None = None  # None: the default
