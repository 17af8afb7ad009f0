"""Figure 7: the cost of identity on the request path and at login.

Every API request verifies an Ed25519 JWT: the first time a token is seen, its signature and
registered claims (PyJWT); after that only its times, key and revocation (a bounded cache of
verified tokens, since clients resend the same token). A login hashes the password with scrypt
(N = 2^15, r = 8) in a thread. Measured in-process, without HTTP, so the figures are the auth
work alone.
"""

from __future__ import annotations

import time

from bench.common import Plan, Row, median
from xce.auth.passwords import hash_password, verify_password
from xce.auth.tokens import TokenService


def run(plan: Plan) -> list[Row]:
    tokens = TokenService.open(plan.root / "auth-bench", "xce", "xce-api", 3600.0, 86400.0)
    token, _ = tokens.issue("bench", ("g1", "g2"), ("user",))
    n = 500 if plan.quick else 2_000
    first, again = [], []
    for _ in range(plan.repeats):
        fresh = [tokens.issue(f"u{i}", ("g1",), ("user",))[0] for i in range(n)]
        started = time.perf_counter()
        for t in fresh:
            tokens.verify(t)
        first.append(n / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(n * 10):
            tokens.verify(token)
        again.append(n * 10 / (time.perf_counter() - started))
    encoded = hash_password("correct horse battery")
    checks = []
    for _ in range(plan.repeats):
        started = time.perf_counter()
        verify_password("correct horse battery", encoded)
        checks.append((time.perf_counter() - started) * 1000)
    first_rate, again_rate, check_ms = median(first), median(again), median(checks)
    return [
        Row(
            "7 JWT verify, first sight (EdDSA signature, claims)",
            f"{first_rate:,.0f} tokens/s ({1e6 / first_rate:.0f} us each)",
            "-",
            "info",
            {"verify_per_s": first_rate},
        ),
        Row(
            "7 JWT verify, same token again (time, key, revocation)",
            f"{again_rate:,.0f} tokens/s ({1e6 / again_rate:.1f} us each)",
            "-",
            "info",
            {"reverify_per_s": again_rate},
        ),
        Row(
            "7 password check at login (scrypt N=2^15, r=8)",
            f"{check_ms:.0f} ms",
            "-",
            "info",
            {"scrypt_ms": check_ms},
        ),
    ]
