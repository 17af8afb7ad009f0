"""Password hashes: scrypt from hashlib, self-describing, compared in constant time.

Format: `scrypt$<log2 N>$<r>$<p>$<salt b64>$<hash b64>`. N = 2**15 by default (about 32 MiB
and a few tens of ms per check); `maxmem` is raised to fit N up to 2**17. Hashing is CPU-bound:
async callers run it in a thread (`asyncio.to_thread`) so the event loop stays responsive.
`verify_or_burn` hashes against a fixed dummy when the user is unknown, so an unknown user and
a wrong password cost the same time (no user enumeration by timing).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

DEFAULT_LOG2_N = 15
_R, _P, _LEN = 8, 1, 32


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=128 * r * n * 2 + (1 << 20),
        dklen=_LEN,
    )


def hash_password(password: str, log2_n: int = DEFAULT_LOG2_N) -> str:
    if not 15 <= log2_n <= 17:
        raise ValueError("scrypt N must be between 2**15 and 2**17")
    salt = os.urandom(16)
    digest = _scrypt(password, salt, log2_n, _R, _P)
    b64 = base64.b64encode
    return f"scrypt${log2_n}${_R}${_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    """True when `password` matches `encoded`; a malformed hash never matches."""
    try:
        scheme, log2_n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt" or not 15 <= int(log2_n) <= 17:
            return False
        got = _scrypt(password, base64.b64decode(salt), int(log2_n), int(r), int(p))
        return hmac.compare_digest(got, base64.b64decode(digest))
    except (ValueError, TypeError):
        return False


_DUMMY = hash_password("not a password: burns the same time for unknown users")


def verify_or_burn(password: str, encoded: str | None) -> bool:
    """`verify_password`, or the same work against a dummy hash when there is no user."""
    if encoded is None:
        verify_password(password, _DUMMY)
        return False
    return verify_password(password, encoded)
