"""The plain-HTTP rule: loopback only, unless insecure is switched on explicitly."""

from __future__ import annotations

import pytest

from xce.client import XceClient
from xce.client.transport import (
    InsecureTransport,
    check_controller_urls,
    check_listener,
    is_loopback,
)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.3", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "fd00::1", "ctl.example", ""])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_listener_rule() -> None:
    check_listener("127.0.0.1", has_tls=False, insecure=False)
    check_listener("0.0.0.0", has_tls=True, insecure=False)
    check_listener("0.0.0.0", has_tls=False, insecure=True)
    with pytest.raises(InsecureTransport, match=r"--insecure"):
        check_listener("0.0.0.0", has_tls=False, insecure=False)


def test_client_rule() -> None:
    check_controller_urls(["http://127.0.0.1:6820", "https://ctl.example:6820"], False)
    check_controller_urls(["http://10.1.1.1:6820"], insecure=True)
    with pytest.raises(InsecureTransport, match=r"http://\[fd00::1\]:6820"):
        XceClient(["https://ctl.example", "http://[fd00::1]:6820"])
    assert XceClient(["http://10.1.1.1:6820"], insecure=True).controllers
