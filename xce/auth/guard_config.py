"""`[guard]` in the cluster config, validated with messages that name the key.

[guard]
allow = ["10.0.0.0/8", "fd00::/8"]     # every route; empty or absent: everyone
admin_allow = ["10.0.1.0/24"]          # routes whose permission is *:admin
worker_allow = ["10.0.2.0/24"]         # routes with the `worker` permission
rate_per_address = 50                  # requests/s per source address (0: off)
burst_per_address = 100
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
from typing import Any

from xce.auth.guard import ConnectionSettings, GuardSettings, Network, RateSettings
from xce.config import ConfigError, _check_keys, _typed

_KEYS = {
    "allow",
    "admin_allow",
    "worker_allow",
    "rate_per_address",
    "burst_per_address",
    "rate_per_identity",
    "burst_per_identity",
    "login_free_failures",
    "login_backoff_s",
    "login_max_lockout_s",
    "header_timeout_s",
    "body_timeout_s",
    "keepalive_timeout_s",
    "max_connections_per_address",
}


def _networks(key: str, value: Any) -> tuple[Network, ...]:
    _typed("guard", key, value, list)
    out = []
    for i, item in enumerate(value):
        _typed("guard", f"{key}[{i}]", item, str)
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ConfigError(f"guard.{key}[{i}] is not an IP network (CIDR): {exc}") from None
    return tuple(out)


def _number(data: dict[str, Any], key: str, default: float, minimum: float = 0.0) -> float:
    value = data.get(key, default)
    _typed("guard", key, value, (int, float))
    if value < minimum:
        raise ConfigError(f"guard.{key} must be at least {minimum:g}, got {value!r}")
    return float(value)


def _rate(data: dict[str, Any], what: str) -> RateSettings:
    rate = _number(data, f"rate_per_{what}", 0.0)
    burst_key = f"burst_per_{what}"
    burst = _number(data, burst_key, max(1.0, 2 * rate))
    if burst != int(burst):
        raise ConfigError(f"guard.{burst_key} must be a whole number, got {burst!r}")
    if rate > 0 and burst < 1:
        raise ConfigError(f"guard.{burst_key} must be at least 1 when rate_per_{what} is set")
    return RateSettings(rate, int(burst))


def _connections(data: dict[str, Any]) -> ConnectionSettings:
    d = ConnectionSettings()
    cap = _number(data, "max_connections_per_address", d.max_connections_per_address)
    if cap != int(cap):
        raise ConfigError(f"guard.max_connections_per_address must be a whole number, got {cap!r}")
    return ConnectionSettings(
        header_timeout_s=_number(data, "header_timeout_s", d.header_timeout_s),
        body_timeout_s=_number(data, "body_timeout_s", d.body_timeout_s),
        keepalive_timeout_s=_number(data, "keepalive_timeout_s", d.keepalive_timeout_s, 1.0),
        max_connections_per_address=int(cap),
    )


def parse_guard(data: Any) -> GuardSettings:
    """Validate `[guard]`; every error names the key."""
    _typed("(top level)", "guard", data, dict)
    _check_keys("guard", data, _KEYS)
    defaults = GuardSettings()
    free = _number(data, "login_free_failures", defaults.login_free_failures)
    if free != int(free):
        raise ConfigError(f"guard.login_free_failures must be a whole number, got {free!r}")
    backoff = _number(data, "login_backoff_s", defaults.login_backoff_s)
    longest = _number(data, "login_max_lockout_s", defaults.login_max_lockout_s)
    if longest < backoff:
        raise ConfigError("guard.login_max_lockout_s must not be below guard.login_backoff_s")
    return GuardSettings(
        allow=_networks("allow", data.get("allow", [])),
        admin_allow=_networks("admin_allow", data.get("admin_allow", [])),
        worker_allow=_networks("worker_allow", data.get("worker_allow", [])),
        per_address=_rate(data, "address"),
        per_identity=_rate(data, "identity"),
        login_free_failures=int(free),
        login_backoff_s=backoff,
        login_max_lockout_s=longest,
        connections=_connections(data),
    )
