"""Measurement only (`python -m bench.transfers --without-sha256`): streamed SHA-256 costs
nothing in the processes the bench starts, to show what the file checks cost.

Loaded by the interpreter at start-up from PYTHONPATH, in the controller, the worker and the
CLI alike. `hashlib.sha256()` without data (a digest computed while a file streams) returns
an object that ignores its input and says a fixed digest, so both ends of a transfer agree
and every check passes without looking at a byte; a one-shot `hashlib.sha256(data)` (tokens,
keys, certificates) stays real. Never on any path but the bench's.
"""

from __future__ import annotations

import hashlib
from typing import Any

_REAL = hashlib.sha256


class _Unhashed:
    name = "sha256"
    digest_size = 32
    block_size = 64

    def update(self, data: Any) -> None:
        pass

    def digest(self) -> bytes:
        return bytes(32)

    def hexdigest(self) -> str:
        return "0" * 64

    def copy(self) -> _Unhashed:
        return self


def _sha256(data: Any = b"", **options: Any) -> Any:
    return _REAL(data, **options) if data else _Unhashed()


hashlib.sha256 = _sha256  # type: ignore[assignment]
