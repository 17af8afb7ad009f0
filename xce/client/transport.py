"""The plain-HTTP rule shared by the controller's listener and every client.

Plain http:// is allowed only to (or on) a loopback address, which is what `xce up`'s
one-machine cluster uses; anything else needs TLS, or an explicit insecure setting for
development (`xce controller --insecure`, `[tls] insecure = true`, `insecure = true` in the
CLI's client.toml, or XCE_INSECURE=1).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from xce.core.errors import InvalidRequest


class InsecureTransport(InvalidRequest):
    """Plain HTTP to or on a non-loopback address without the insecure switch."""

    code = "insecure_transport"


def is_loopback(host: str) -> bool:
    """True for `localhost` and literal loopback addresses (127.0.0.0/8, ::1); a host name
    other than localhost is never trusted to stay on this machine."""
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


UNIX_PREFIX = "unix:"  # a controller's local socket: `unix:/run/xce/xce.sock`


def unix_path(url: str) -> str | None:
    """The socket path of a `unix:PATH` controller address, else None."""
    return url[len(UNIX_PREFIX) :] if url.startswith(UNIX_PREFIX) else None


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: the controller's local socket, where the kernel tells it
    who we are (no token, no TLS: the bytes never leave this host)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def check_controller_urls(urls: Iterable[str], insecure: bool) -> None:
    """Refuse http:// controller URLs off this machine unless `insecure`."""
    if insecure:
        return
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
            raise InsecureTransport(
                f"refusing plain http:// to {url}: use https:// with the cluster CA "
                "(tls.ca_file / ca_file in client.toml), or set insecure for development"
            )


def check_listener(host: str, has_tls: bool, insecure: bool) -> None:
    """Refuse a plain-HTTP listener on a non-loopback address unless `insecure`."""
    if has_tls or insecure or is_loopback(host):
        return
    raise InsecureTransport(
        f"refusing to serve plain HTTP on {host}: set [tls] cert_file and key_file "
        "(see `xce tls init`), listen on 127.0.0.1, or pass --insecure for development"
    )
