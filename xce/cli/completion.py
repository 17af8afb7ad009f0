"""Shell completion (placeholder, filled in below)."""

from __future__ import annotations

from typing import Any


def register(app: Any) -> None:
    return None
