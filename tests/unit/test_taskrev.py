"""Hostile-review findings on the task service (issue 15 review): each test plays one attack
on the worker side of `xce launch` and fails without its fix."""

from __future__ import annotations

import pytest

from xce.worker.tasks import TaskRefused, parse_request


def test_a_deeply_nested_request_is_refused_not_a_crash() -> None:
    """`[[[[...` within the 512 KiB request limit made json raise RecursionError, which no
    handler caught: the connection died unanswered and the worker logged a traceback per
    request (a cheap log flood). It must be an ordinary refusal."""
    for line in (b"[" * 200_000 + b"\n", b'{"a":' * 100_000 + b"\n"):
        with pytest.raises(TaskRefused, match="JSON"):
            parse_request(line)
