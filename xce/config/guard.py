"""`[guard]` in the cluster config, declared once as a typed table (xce/config/check.py).

[guard]
allow = ["10.0.0.0/8", "fd00::/8"]     # every route; empty or absent: everyone
admin_allow = ["10.0.1.0/24"]          # routes whose permission is *:admin
worker_allow = ["10.0.2.0/24"]         # routes with the `worker` permission
rate_per_address = 50                  # requests/s per source address (0: off)
burst_per_address = 100                # default: twice the rate, at least 1
rate_per_identity = 20                 # requests/s per Authorization header (0: off)
burst_per_identity = 40
login_free_failures = 3                # failed logins per (user, address) before backoff
login_backoff_s = 1.0                  # first wait, doubled per further failure
login_max_lockout_s = 300              # the longest wait
header_timeout_s = 10                  # request line and headers, in total (0: off)
body_timeout_s = 30                    # longest silence while a body comes (0: off)
keepalive_timeout_s = 30               # idle connection between requests
max_connections_per_address = 1024     # open at once per source address (0: off)
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from xce.config.check import Table
from xce.core.validation import Invalid

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class RateSettings:
    """`rate` requests per second sustained, `burst` at once; rate 0 switches the limit off."""

    rate: float = 0.0
    burst: int = 0


@dataclass(frozen=True)
class ConnectionSettings:
    """Connection limits of `[guard]` (xce/listen/connections.py); 0 switches one off."""

    header_timeout_s: float = 10.0  # request line and headers, in total
    body_timeout_s: float = 30.0  # the longest silence while a body is coming
    keepalive_timeout_s: float = 30.0  # idle between requests (aiohttp's own timer)
    max_connections_per_address: int = 1024  # open at once from one source address


@dataclass(frozen=True)
class GuardSettings:
    """`[guard]`: allow-lists (empty = everyone), rate limits (off unless set) and login
    backoff (on by default)."""

    allow: tuple[Network, ...] = ()
    admin_allow: tuple[Network, ...] = ()
    worker_allow: tuple[Network, ...] = ()
    per_address: RateSettings = field(default_factory=RateSettings)
    per_identity: RateSettings = field(default_factory=RateSettings)
    login_free_failures: int = 3
    login_backoff_s: float = 1.0
    login_max_lockout_s: float = 300.0
    max_keys: int = 100_000
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)


Number = Annotated[float, msgspec.Meta(ge=0)]  # "must be at least 0"
_G, _C = GuardSettings(), ConnectionSettings()


class GuardTable(Table, frozen=True):
    allow: list[str] = []
    admin_allow: list[str] = []
    worker_allow: list[str] = []
    rate_per_address: Number = 0.0
    burst_per_address: Number | None = None
    rate_per_identity: Number = 0.0
    burst_per_identity: Number | None = None
    login_free_failures: Number = _G.login_free_failures
    login_backoff_s: Number = _G.login_backoff_s
    login_max_lockout_s: Number = _G.login_max_lockout_s
    header_timeout_s: Number = _C.header_timeout_s
    body_timeout_s: Number = _C.body_timeout_s
    keepalive_timeout_s: Annotated[float, msgspec.Meta(ge=1)] = _C.keepalive_timeout_s
    max_connections_per_address: Number = _C.max_connections_per_address

    def __post_init__(self) -> None:
        for key in ("login_free_failures", "max_connections_per_address"):
            _whole(key, getattr(self, key))
        for what in ("address", "identity"):
            _whole(f"burst_per_{what}", self._burst(what))
            if getattr(self, f"rate_per_{what}") > 0 and self._burst(what) < 1:
                raise Invalid(f"burst_per_{what} must be at least 1 when rate_per_{what} is set")
        if self.login_max_lockout_s < self.login_backoff_s:
            raise Invalid("login_max_lockout_s must not be below guard.login_backoff_s")
        for key in ("allow", "admin_allow", "worker_allow"):
            _networks(key, getattr(self, key))

    def _burst(self, what: str) -> float:
        burst: float | None = getattr(self, f"burst_per_{what}")
        return max(1.0, 2 * getattr(self, f"rate_per_{what}")) if burst is None else burst

    def settings(self) -> GuardSettings:
        def rate(what: str) -> RateSettings:
            return RateSettings(float(getattr(self, f"rate_per_{what}")), int(self._burst(what)))

        return GuardSettings(
            allow=_networks("allow", self.allow),
            admin_allow=_networks("admin_allow", self.admin_allow),
            worker_allow=_networks("worker_allow", self.worker_allow),
            per_address=rate("address"),
            per_identity=rate("identity"),
            login_free_failures=int(self.login_free_failures),
            login_backoff_s=float(self.login_backoff_s),
            login_max_lockout_s=float(self.login_max_lockout_s),
            connections=ConnectionSettings(
                header_timeout_s=float(self.header_timeout_s),
                body_timeout_s=float(self.body_timeout_s),
                keepalive_timeout_s=float(self.keepalive_timeout_s),
                max_connections_per_address=int(self.max_connections_per_address),
            ),
        )


def _whole(key: str, value: float) -> None:
    if value != int(value):
        raise Invalid(f"{key} must be a whole number, got {value!r}")


def _networks(key: str, values: list[str]) -> tuple[Network, ...]:
    out = []
    for i, item in enumerate(values):
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise Invalid(f"{key}[{i}] is not an IP network (CIDR): {exc}") from None
    return tuple(out)
