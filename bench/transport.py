"""Figure 7: what transport security costs per request.

- guard decisions/s: the allow-list check plus the per-address and per-identity token
  buckets, as the middleware runs them for every request (pure logic, one core);
- TLS handshake: a fresh TLS 1.3 connection with the cluster's EC P-256 certificates on
  127.0.0.1 (client and server in this process), median of many. Keep-alive sessions
  (XceClient reuses its connections) pay it once per connection, not per request.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import time

from bench.common import Plan, Row, median, verdict
from xce.auth.guard import GuardSettings, RateLimiter, RateSettings, allowed, parse_address
from xce.auth.pki import client_ssl_context, create_ca, issue_certificate, server_ssl_context
from xce.config.settings import TlsSettings

# decisions/s: at 50k/s the guard costs 20 us, 2% of one core at 1,000 requests/s (more than
# the controller serves on a machine like this), so it stays noise next to the handlers.
GUARD_TARGET = 50_000
HANDSHAKE_TARGET_MS = 20.0


def guard_rate(seconds: float) -> float:
    settings = GuardSettings(
        allow=(ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")),
        admin_allow=(ipaddress.ip_network("10.0.1.0/24"),),
    )
    per_address = RateLimiter(RateSettings(1e9, 10**9))
    per_identity = RateLimiter(RateSettings(1e9, 10**9))
    headers = [f"Bearer token-{i}" for i in range(1000)]
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(1000):
            now = time.monotonic()
            address = parse_address(f"10.0.{i % 4}.{i % 250}")
            assert allowed(settings, "default", address)
            per_address.take(str(address), now)
            per_identity.take(hashlib.sha256(headers[i].encode()).hexdigest(), now)
        done += 1000
    return done / (time.perf_counter() - start)


async def _handshakes(plan: Plan, count: int) -> list[float]:
    pki = plan.root / "pki"
    ca = create_ca(pki)
    server_pair = issue_certificate(ca, pki, "controller", ["127.0.0.1"])
    server = server_ssl_context(TlsSettings(server_pair.cert_path, server_pair.key_path))
    client = client_ssl_context(TlsSettings(ca_file=ca.cert_path))

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    srv = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=server)
    port = srv.sockets[0].getsockname()[1]
    times = []
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            times.append((time.perf_counter() - t0) * 1000)
            writer.close()
    finally:
        srv.close()
        await srv.wait_closed()
    return times


def run(plan: Plan) -> list[Row]:
    seconds = 0.5 if plan.quick else 2.0
    rates = [guard_rate(seconds) for _ in range(plan.repeats)]
    rate = median(rates)
    hs = asyncio.run(_handshakes(plan, 50 if plan.quick else 200))
    ms = median(hs)
    return [
        Row(
            "7  guard decisions/s (allow-list + 2 buckets)",
            f"{rate:,.0f}/s",
            f">= {GUARD_TARGET:,}/s",
            verdict(rate >= GUARD_TARGET),
        ),
        Row(
            "7  TLS handshake, EC P-256, loopback",
            f"{ms:.2f} ms median",
            f"<= {HANDSHAKE_TARGET_MS:.0f} ms",
            verdict(ms <= HANDSHAKE_TARGET_MS),
        ),
    ]
