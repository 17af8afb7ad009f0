"""The guard in front of authentication: CIDR allow-lists, token-bucket rate limits and login
brute-force backoff. Pure logic: no I/O, the caller passes the time in (monotonic seconds).

Why before authentication: a denied address or a flood must cost the controller as little as
possible, so these checks need nothing but the source address and raw headers.

Promises:
- `allowed(route_class, address)`: an address passes when it is in `allow` (if that list is
  non-empty) and in the route class's own list (`admin_allow` / `worker_allow`, if non-empty).
  IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are matched as the IPv4 address they carry.
- `RateLimiter.take(key, now)` is a token bucket: `burst` requests at once, refilled at `rate`
  per second; a refusal returns how many seconds until one token is back (for Retry-After).
  At most `max_keys` buckets are kept (least recently used dropped first: a dropped bucket is
  a full one, so forgetting can only be generous, never lock anyone out).
- `LoginThrottle` keys failures by (username, address): after `free_failures` failures in a
  row the pair waits `base_s * 2**k` seconds (capped at `max_lockout_s`) before it may try
  again. Another address is never affected, and every wait ends, so no one can lock an admin
  out of an allowed address, and a success clears the pair.
"""

from __future__ import annotations

import functools
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from xce.config.guard import (
    Address,
    GuardSettings,
    Network,
    RateSettings,
)


@functools.lru_cache(maxsize=4096)
def parse_address(text: str) -> Address | None:
    """The peer address as an IP, IPv4-mapped IPv6 unwrapped; None when it is not an IP
    (a Unix socket), which no allow-list matches. Remembered (a pure function of the text,
    the answers immutable): the guard asks for every request, and `ipaddress` parses in
    Python, a few microseconds each time."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=4096)
def peer(remote: str) -> tuple[Address | None, str]:
    """(`parse_address(remote)`, the address as messages and bucket keys show it: the IP's
    canonical text, else the raw peer, else "unknown"). Remembered like `parse_address`:
    `str()` of an `ipaddress` object formats in Python, ~2 us on each request."""
    address = parse_address(remote)
    return address, str(address) if address is not None else (remote or "unknown")


def _inside(address: Address | None, networks: tuple[Network, ...]) -> bool:
    if not networks:
        return True
    return address is not None and any(
        address in net for net in networks if net.version == address.version
    )


def allowed(settings: GuardSettings, route_class: str, address: Address | None) -> bool:
    """Whether `address` may reach a route of `route_class` at all."""
    if not _inside(address, settings.allow):
        return False
    if route_class == "admin":
        return _inside(address, settings.admin_allow)
    if route_class == "worker":
        return _inside(address, settings.worker_allow)
    return True


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token buckets by key (an address, or a digest of the Authorization header)."""

    def __init__(self, settings: RateSettings, max_keys: int = 100_000) -> None:
        self.settings = settings
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.settings.rate > 0

    def take(self, key: str, now: float) -> float:
        """Take one token for `key`: 0.0 when granted, else seconds until one is available."""
        if not self.enabled:
            return 0.0
        rate, burst = self.settings.rate, max(self.settings.burst, 1)
        bucket = self._buckets.pop(key, None) or _Bucket(float(burst), now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now
        self._buckets[key] = bucket
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / rate


@dataclass
class _Failures:
    count: int
    locked_until: float


class LoginThrottle:
    """Exponential backoff on failed logins per (username, address) pair."""

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self._pairs: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    def wait(self, user: str, address: str, now: float) -> float:
        """Seconds this pair must still wait before it may try again (0.0: go ahead)."""
        entry = self._pairs.get((user, address))
        if entry is None:
            return 0.0
        return max(0.0, entry.locked_until - now)

    def failed(self, user: str, address: str, now: float) -> float:
        """Record a failure; returns the lock-out it starts (0.0 while failures are free)."""
        key = (user, address)
        entry = self._pairs.pop(key, None) or _Failures(0, now)
        entry.count += 1
        over = entry.count - self.settings.login_free_failures
        lock = 0.0
        if over >= 0:
            lock = min(
                self.settings.login_backoff_s * 2.0 ** min(over, 40),
                self.settings.login_max_lockout_s,
            )
        entry.locked_until = now + lock
        self._pairs[key] = entry
        while len(self._pairs) > self.settings.max_keys:
            self._pairs.popitem(last=False)
        return lock

    def succeeded(self, user: str, address: str) -> None:
        self._pairs.pop((user, address), None)


@dataclass
class GuardState:
    """The buckets and login failures of one controller, built by its composition
    (xce/server/compose.py) and read by the guard middleware (`GUARD`)."""

    settings: GuardSettings
    per_address: RateLimiter
    per_identity: RateLimiter
    logins: LoginThrottle
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def create(cls, settings: GuardSettings) -> GuardState:
        return cls(
            settings,
            RateLimiter(settings.per_address, settings.max_keys),
            RateLimiter(settings.per_identity, settings.max_keys),
            LoginThrottle(settings),
        )
