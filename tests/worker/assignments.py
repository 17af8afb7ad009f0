"""Assignments for tests that build one by hand: the worker reads them as
`protocol.Assignment` (decoded once, xce/worker/agent/reconcile.py), so a test names only the
keys it cares about and the rest get the defaults below."""

from __future__ import annotations

from typing import Any

import msgspec

from xce.protocol.worker import Assignment

# What every assignment must carry (the Struct defaults the rest).
REQUIRED: dict[str, Any] = {"job_id": "1", "attempt": 0, "action": "run", "user": "root"}


def assignment(**keys: Any) -> Assignment:
    """An assignment with `keys` over the required defaults, decoded as the worker decodes
    the controller's answer (so a wrong type fails here as it would there)."""
    return msgspec.convert({**REQUIRED, **keys}, Assignment)
