"""The guard's pure logic: allow-lists, token buckets and login backoff, time passed in."""

from __future__ import annotations

import ipaddress

import pytest

from xce.auth.guard import (
    GuardSettings,
    LoginThrottle,
    RateLimiter,
    RateSettings,
    allowed,
    parse_address,
    peer,
)
from xce.config.loader import parse_config
from xce.core.errors import ConfigError


def _nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


GUARD = GuardSettings(
    allow=_nets("10.0.0.0/8", "fd00::/8"),
    admin_allow=_nets("10.0.1.0/24", "fd00:1::/32"),
    worker_allow=_nets("10.0.2.0/24"),
)


@pytest.mark.parametrize(
    ("route_class", "address", "ok"),
    [
        ("default", "10.9.9.9", True),
        ("default", "192.168.1.1", False),
        ("default", "fd00:5::1", True),
        ("default", "2001:db8::1", False),
        ("default", "::ffff:10.0.0.7", True),  # IPv4-mapped IPv6 is the IPv4 address
        ("admin", "10.0.1.20", True),
        ("admin", "10.0.3.20", False),  # in allow, not in admin_allow
        ("admin", "fd00:1:2::3", True),
        ("admin", "fd00:2::3", False),
        ("worker", "10.0.2.5", True),
        ("worker", "10.0.1.5", False),
        ("default", "not-an-ip", False),  # a Unix socket peer matches no list
    ],
)
def test_allow_lists(route_class: str, address: str, ok: bool) -> None:
    assert allowed(GUARD, route_class, parse_address(address)) is ok


def test_empty_lists_allow_everyone() -> None:
    assert allowed(GuardSettings(), "admin", parse_address("203.0.113.9"))
    assert allowed(GuardSettings(), "default", None)


def test_token_bucket_bursts_refills_and_says_when() -> None:
    bucket = RateLimiter(RateSettings(rate=2.0, burst=3))
    assert [bucket.take("a", 100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take("a", 100.0) == pytest.approx(0.5)  # one token every 0.5 s
    assert bucket.take("b", 100.0) == 0.0  # another key is unaffected
    assert bucket.take("a", 100.25) == pytest.approx(0.25)
    assert bucket.take("a", 100.5) == 0.0
    assert bucket.take("a", 1000.0) == 0.0  # refills to burst, not beyond
    assert [bucket.take("a", 1000.0) for _ in range(3)][-1] > 0


def test_disabled_limiter_and_bounded_keys() -> None:
    assert RateLimiter(RateSettings()).take("x", 0.0) == 0.0
    bucket = RateLimiter(RateSettings(rate=1.0, burst=1), max_keys=2)
    for key in ("a", "b", "c"):
        bucket.take(key, 0.0)
    assert len(bucket._buckets) == 2
    assert bucket.take("a", 0.0) == 0.0  # forgotten means full again, never stricter


def test_login_backoff_doubles_and_is_capped() -> None:
    throttle = LoginThrottle(
        GuardSettings(login_free_failures=2, login_backoff_s=1.0, login_max_lockout_s=5.0)
    )
    assert throttle.failed("root", "10.0.0.9", 0.0) == 0.0
    assert throttle.failed("root", "10.0.0.9", 0.0) == 1.0
    assert throttle.wait("root", "10.0.0.9", 0.5) == pytest.approx(0.5)
    assert throttle.failed("root", "10.0.0.9", 1.0) == 2.0
    assert throttle.failed("root", "10.0.0.9", 3.0) == 4.0
    assert throttle.failed("root", "10.0.0.9", 7.0) == 5.0  # capped: it always ends
    assert throttle.wait("root", "10.0.0.9", 12.0) == 0.0
    # The same user from another address, and another user from the same address: free.
    assert throttle.wait("root", "10.0.1.1", 7.0) == 0.0
    assert throttle.wait("alice", "10.0.0.9", 7.0) == 0.0
    throttle.succeeded("root", "10.0.0.9")
    assert throttle.failed("root", "10.0.0.9", 20.0) == 0.0  # a success starts over


def test_guard_config_parses_and_names_bad_keys() -> None:
    cfg = parse_config(
        {
            "guard": {
                "allow": ["10.0.0.0/8", "fd00::/8"],
                "admin_allow": ["10.0.1.7"],
                "rate_per_identity": 5,
                "login_max_lockout_s": 60,
            }
        }
    )
    assert cfg.guard.admin_allow == _nets("10.0.1.7/32")
    assert cfg.guard.per_identity == RateSettings(5.0, 10)
    assert cfg.guard.per_address.rate == 0.0
    assert cfg.guard.login_max_lockout_s == 60.0
    for bad, message in [
        ({"alow": []}, "unknown key guard.alow"),
        ({"allow": "10.0.0.0/8"}, "guard.allow must be a list"),
        ({"admin_allow": ["10.0.0.0/33"]}, r"guard.admin_allow\[0\] is not an IP network"),
        ({"rate_per_address": -1}, "guard.rate_per_address must be at least 0"),
        ({"burst_per_identity": 2.5}, "guard.burst_per_identity must be a whole number"),
        ({"login_backoff_s": 10, "login_max_lockout_s": 5}, "guard.login_max_lockout_s"),
        ({"login_free_failures": True}, "guard.login_free_failures must be"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"guard": bad})


def test_peer_names_the_address_as_messages_and_buckets_show_it() -> None:
    assert peer("::ffff:192.0.2.7") == (ipaddress.ip_address("192.0.2.7"), "192.0.2.7")
    assert peer("2001:DB8::1") == (ipaddress.ip_address("2001:db8::1"), "2001:db8::1")
    assert peer("/run/xce.sock") == (None, "/run/xce.sock")
    assert peer("") == (None, "unknown")
