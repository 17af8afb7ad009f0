"""Login with a MUNGE credential: the node says who the user is, as on a Slurm site.

The CLI asks its node's munged for a credential whose payload names this cluster
(`xce.auth.munge.login_payload`) and posts it to `POST /api/v1/auth/munge`; the controller's
own munged (same key) checks it and says which uid made it. The uid's account on the
controller's host becomes the identity, with its OS groups; the controller then issues a
short-lived token (`token_ttl_s`), so munged is asked once per token, not per request.

The credential is the caller's input, so it is refused, with one line saying why, when:
- munged refuses it: another key, altered, expired, from the future, replayed on this munged;
- its payload is not ours: not our JSON, or for another cluster or service (`aud`);
- it is older (or further ahead) than `ttl_s`, by munged's encode time or the payload's;
- it was used before: munged remembers credentials it decoded, but a controller may sit
  behind several munged (HA candidates, a restarted daemon), so the controller keeps its own
  list of the credentials it accepted until they can no longer pass the age checks;
- its uid has no account on the controller's host, or is root (`allow_root` to accept).

libmunge blocks while munged answers, and name lookups may ask a directory: both run in the
backend's own threads (`blocking_pool`).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import pwd
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from xce.auth import munge
from xce.auth.accounts import group_names
from xce.auth.backends.base import AuthDenied, BackendUnavailable, Principal, blocking_pool
from xce.config.check import PosFloat, Table, convert
from xce.core.errors import ConfigError
from xce.core.validation import Invalid, hint

MAX_TTL_S = 3600.0  # munged's own default --max-ttl: an older credential is refused anyway
MAX_SEEN = 100_000  # accepted credentials remembered at once (see ReplayCache)


class MungeDenied(AuthDenied):
    """A refused credential; `uid` is who made it when munged could tell (for the audit)."""

    def __init__(self, message: str, uid: int | None = None) -> None:
        super().__init__(message)
        self.uid = uid


class LoginPayload(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The payload `xce.auth.munge.login_payload` writes, and nothing else."""

    aud: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    nonce: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{16,128}$")]
    ts: float


class ReplayCache:
    """Digests of the credentials accepted lately, each kept until it expires.

    Every entry lives the same time, so insertion order is expiry order and pruning pops from
    the front. When full of unexpired entries, new logins are refused (503) rather than old
    entries dropped: dropping one would reopen its replay window."""

    def __init__(self, max_entries: int = MAX_SEEN, clock: Any = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def add(self, digest: bytes, keep_s: float) -> bool:
        """Remember `digest` for `keep_s`; False when it is already remembered."""
        now = self.clock()
        while self._seen and next(iter(self._seen.values())) <= now:
            self._seen.popitem(last=False)
        if digest in self._seen:
            return False
        if len(self._seen) >= self.max_entries:
            raise BackendUnavailable("too many MUNGE logins at once; try again in a few seconds")
        self._seen[digest] = now + keep_s
        return True


@dataclass(frozen=True)
class MungeBackend:
    """Checks MUNGE credentials with the munged at `socket`; see the module's docstring."""

    socket: str = munge.DEFAULT_SOCKET
    ttl_s: float = 300.0
    token_ttl_s: float = 3600.0
    allow_root: bool = False
    name: str = "munge"
    threads: ThreadPoolExecutor = field(
        default_factory=lambda: blocking_pool("munge"), repr=False, compare=False
    )
    seen: ReplayCache = field(default_factory=ReplayCache, repr=False, compare=False)

    async def authenticate_credential(self, credential: str, audience: str) -> Principal:
        """The principal who made `credential` for the cluster `audience`; raises
        `MungeDenied` (401) for a credential to refuse and `BackendUnavailable` (503) when
        munged cannot be asked."""
        loop = asyncio.get_running_loop()
        decoded, account, groups = await loop.run_in_executor(
            self.threads, self._decode, credential
        )
        self._check(decoded, audience, time.time())
        # Checked and remembered in one step of the event loop: two requests with one
        # credential cannot both get past this line.
        digest = hashlib.sha256(b"%d\0" % decoded.uid + decoded.payload).digest()
        if not self.seen.add(digest, 2 * self.ttl_s + 2):
            raise MungeDenied("replayed MUNGE credential (each one logs in once)", decoded.uid)
        return Principal(user=account.pw_name, groups=groups, backend=self.name)

    def _decode(self, credential: str) -> tuple[munge.Decoded, pwd.struct_passwd, tuple[str, ...]]:
        """munged's verdict, then the uid's account and groups (in a backend thread)."""
        try:
            decoded = munge.decode(credential, self.socket)
        except munge.MungeError as exc:
            if exc.daemon_fault:
                raise BackendUnavailable(
                    f"munged at {self.socket} could not check the credential: {exc.message}"
                ) from None
            raise MungeDenied(munge.MESSAGES.get(exc.code, exc.message)) from None
        if decoded.uid == 0 and not self.allow_root:
            raise MungeDenied("root may not log in with MUNGE on this cluster", 0)
        try:
            account = pwd.getpwuid(decoded.uid)
        except KeyError:
            raise MungeDenied(
                f"uid {decoded.uid} has no user name on the controller's host", decoded.uid
            ) from None
        return decoded, account, tuple(group_names(account))

    def _check(self, decoded: munge.Decoded, audience: str, now: float) -> None:
        """The payload is ours, for this cluster, and fresh by both clocks."""
        uid = decoded.uid
        try:
            payload = msgspec.json.decode(decoded.payload, type=LoginPayload, strict=True)
        except msgspec.DecodeError:
            raise MungeDenied(
                "the MUNGE credential was not made for logging in to XCE (its payload is "
                "not an XCE login)",
                uid,
            ) from None
        if payload.aud != audience:
            raise MungeDenied(
                f"the MUNGE credential is for {payload.aud!r}, not this cluster ({audience!r})",
                uid,
            )
        # munged's encode time is whole seconds: one more second of slack.
        dates = (("payload", payload.ts, 0.0), ("credential", float(decoded.encode_time), 1.0))
        for what, when, slack in dates:
            if not math.isfinite(when) or abs(now - when) > self.ttl_s + slack:
                raise MungeDenied(
                    f"the MUNGE {what} is dated {when - now:+.0f} s from the controller's "
                    f"clock, beyond {self.ttl_s:g} s (check the nodes' clocks)",
                    uid,
                )


SocketPath = Annotated[str, hint("must be an absolute path", pattern=r"^/")]


class MungeOptions(Table, frozen=True):
    """The keys of a `type = "munge"` `[[auth.backend]]` table."""

    socket: SocketPath = munge.DEFAULT_SOCKET
    ttl_s: Annotated[
        float, hint(f"must be > 0 and at most {MAX_TTL_S:g} (munged's longest)", gt=0, le=MAX_TTL_S)
    ] = 300.0
    token_ttl_s: PosFloat = 3600.0
    allow_root: bool = False
    name: str = "munge"

    def __post_init__(self) -> None:
        if "\x00" in self.socket or len(self.socket) > 107:  # sun_path holds 108 bytes
            raise Invalid(f"socket must be a Unix socket path, got {self.socket!r}")


def from_config(section: dict[str, Any], base: Path, where: str) -> MungeBackend:
    """`{type = "munge", socket = "/run/munge/munge.socket.2"}`: libmunge must load now, so
    a controller without MUNGE installed stops at start, not at the first login."""
    o = convert(section, MungeOptions, where)
    try:
        munge.load()
    except munge.MungeError as exc:
        raise ConfigError(f"{where}.type munge: {exc.message}") from None
    return MungeBackend(
        socket=o.socket,
        ttl_s=o.ttl_s,
        token_ttl_s=o.token_ttl_s,
        allow_root=o.allow_root,
        name=o.name,
    )
