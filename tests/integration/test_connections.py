"""Idle, partial-header and partial-body connections against a real controller: each is closed
after its timeout, one address cannot hold more than its share of
connections, /healthz keeps answering at once, and the log stays a few lines long."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster
from xce.auth.pki import create_ca, issue_certificate

GUARD = """
[guard]
header_timeout_s = 1.0
body_timeout_s = 1.0
keepalive_timeout_s = 2.0
max_connections_per_address = 100
"""
HOG = "127.0.0.2"  # the flooding client's source address
FLOOD = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("connections") / "cluster")
    c.role_sections["controller"] = GUARD
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


async def _open(c: Cluster, source: str = HOG) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", c.port, local_addr=(source, 0))


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before closing; fails if it is still open after `seconds`."""
    return await asyncio.wait_for(reader.read(), seconds)


async def _healthz_seconds(c: Cluster) -> float:
    started = time.monotonic()
    reader, writer = await _open(c, "127.0.0.1")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    return time.monotonic() - started


async def test_idle_flood_is_capped_and_timed_out_while_healthz_answers(cluster: Cluster) -> None:
    started = time.monotonic()
    conns = [await _open(cluster) for _ in range(FLOOD)]
    opened = time.monotonic() - started
    # Another address is not affected, and is served at once.
    assert await _healthz_seconds(cluster) < 1.0
    # Each connection is closed by the server: over the cap (100 open at once) at once with
    # a 503 naming the problem, under it with a 408 after the header timeout (1 s).
    answers = await asyncio.gather(*(_closed_within(r, 5 + opened) for r, _ in conns))
    too_many = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    too_slow = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    assert len(too_many) + len(too_slow) == FLOOD, [a[:40] for a in answers]
    assert all(b"too_many_connections" in a for a in too_many)
    assert all(b"request_timeout" in a for a in too_slow)
    assert len(too_many) >= FLOOD - 100 * (1 + int(opened)), (len(too_many), opened)
    for _, w in conns:
        w.close()
    # The hog's slots are free again.
    reader, writer = await _open(cluster)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (await _closed_within(reader, 5)).startswith(b"HTTP/1.1 200")
    writer.close()
    # Hundreds of refusals and timeouts are a couple of log lines, not one each.
    lines = [li for li in cluster.log_text().splitlines() if "refused or closed" in li]
    assert 1 <= len(lines) <= 3, lines
    assert "connection_limit" in lines[0] or "header_timeout" in lines[0]


async def test_headers_sent_a_byte_at_a_time_do_not_extend_the_deadline(cluster: Cluster) -> None:
    reader, writer = await _open(cluster, "127.0.0.3")
    started = time.monotonic()
    answer = b""
    for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
        # A slowloris: a byte every 0.1 s, always something, never the whole headers.
        writer.write(bytes([byte]))
        try:
            answer = await asyncio.wait_for(reader.read(1024), 0.1)
        except TimeoutError:
            continue
        answer += await _closed_within(reader, 3)
        break
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert time.monotonic() - started < 3  # the 1 s total, not 1 s per byte
    writer.close()


async def test_a_stalled_body_is_closed(cluster: Cluster) -> None:
    reader, writer = await _open(cluster, "127.0.0.4")
    writer.write(
        b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"user'
    )
    started = time.monotonic()
    await _closed_within(reader, 5)
    assert 0.8 < time.monotonic() - started < 4
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed(cluster: Cluster) -> None:
    reader, writer = await _open(cluster, "127.0.0.5")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    length = int(
        next(li for li in head.split(b"\r\n") if li.lower().startswith(b"content-length")).split(
            b":"
        )[1]
    )
    await reader.readexactly(length)
    started = time.monotonic()
    assert await _closed_within(reader, 6) == b""  # keepalive_timeout_s = 2
    assert time.monotonic() - started < 5
    writer.close()


# --- over TLS: connections that never finish their handshake -------------------------------

TLS_CAP = 5


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A controller serving HTTPS under the guard (cap TLS_CAP per address, 1 s for the
    request's headers, and so for its handshake)."""
    pki = tmp_path_factory.mktemp("pki")
    pair = issue_certificate(create_ca(pki / "ca"), pki, "controller", ["127.0.0.1"])
    c = Cluster(tmp_path_factory.mktemp("tls-connections") / "cluster")
    c.url = f"https://127.0.0.1:{c.port}"
    c.ssl_context = ssl.create_default_context(cafile=str(pki / "ca" / "ca.pem"))
    c.role_sections["controller"] = (
        f'[tls]\ncert_file = "{pair.cert_path}"\nkey_file = "{pair.key_path}"\n'
        + GUARD.replace("= 100", f"= {TLS_CAP}")
    )
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


async def _tls_healthz(c: Cluster, source: str) -> bytes:
    assert c.ssl_context is not None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", c.port, ssl=c.ssl_context, local_addr=(source, 0)),
        5,
    )
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


async def test_tls_handshakes_never_begun_are_capped_and_timed_out(tls_cluster: Cluster) -> None:
    """Connections that never start TLS count against their address's cap from the moment
    they are accepted (one more is closed at once) and are closed after the header
    timeout (1 s, not asyncio's 60 s handshake timeout); another address is served
    meanwhile, and the hog's slots are free again once they are closed."""
    silent = [await _open(tls_cluster) for _ in range(TLS_CAP)]
    started = time.monotonic()
    over, over_writer = await _open(tls_cluster)
    assert await _closed_within(over, 0.9) == b""  # before any header timeout could
    over_writer.close()
    assert (await _tls_healthz(tls_cluster, "127.0.0.1")).startswith(b"HTTP/1.1 200")
    for reader, writer in silent:
        assert await _closed_within(reader, 5) == b""
        writer.close()
    assert time.monotonic() - started < 5
    assert (await _tls_healthz(tls_cluster, HOG)).startswith(b"HTTP/1.1 200")
