"""The skew rule and the replication checks, as pure functions of two builds' versions
(xce/core/versions.py, xce/ha/protocol.py)."""

from __future__ import annotations

import pytest

from xce import __version__
from xce.core.versions import CHECKPOINT_FORMAT, WAL_FORMAT, release_tuple, skew_problem
from xce.ha import protocol


def shifted(minor: int, major: int = 0) -> str:
    found = release_tuple(__version__)
    assert found is not None
    return f"{found[0] + major}.{max(found[1] + minor, 0)}.{found[2]}"


@pytest.mark.parametrize(
    ("theirs", "newer", "allowed"),
    [
        (shifted(0), 0, True),
        (shifted(-1), 0, True),
        (shifted(-2), 0, False),
        (shifted(+1), 0, False),  # a worker: never newer
        (shifted(+1), 1, True),  # a standby: one newer, as an upgrade begins
        (shifted(+2), 1, False),
        (shifted(0, major=1), 1, False),
        ("not a release", 0, True),  # unknown: formats decide
    ],
)
def test_the_skew_rule(theirs: str, newer: int, allowed: bool) -> None:
    why = skew_problem(theirs, "worker", newer_minors=newer)
    assert (why is None) is allowed, why
    if why:
        assert theirs in why and __version__ in why


def test_a_primary_refuses_a_standby_that_reads_less_than_it_writes() -> None:
    assert protocol.cannot_serve(protocol.versions(), "s1") is None
    old = protocol.cannot_serve({}, "s1")  # a hello from before versions were sent
    assert old is not None and "before 0.2.0" in old and f"writes {WAL_FORMAT}" in old
    ckpt = protocol.cannot_serve(
        {**protocol.versions(), "checkpointFormat": CHECKPOINT_FORMAT - 1}, "s1"
    )
    assert ckpt is not None and "checkpoint format" in ckpt
    far = protocol.cannot_serve({**protocol.versions(), "release": shifted(+2)}, "s1")
    assert far is not None and shifted(+2) in far


def test_a_standby_refuses_a_primary_that_writes_more_than_it_reads() -> None:
    assert protocol.cannot_follow(protocol.versions()) is None
    assert protocol.cannot_follow({}) is None  # an older primary: format 1, readable
    newer = protocol.cannot_follow({"release": "9.0.0", "walFormat": WAL_FORMAT + 1}, "p")
    assert newer is not None and f"format {WAL_FORMAT + 1}" in newer and "9.0.0" in newer
    assert f"reads ≤ {WAL_FORMAT}" in newer
