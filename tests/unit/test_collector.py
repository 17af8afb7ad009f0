"""A long-running role runs with the collector paced (xce/server/collector.py): its
youngest generation is collected every `YOUNG` net allocations, the older ones as CPython
does, and a one-shot command keeps CPython's pace."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from xce.cli.roles import _run_role
from xce.config.settings import Config
from xce.server.collector import YOUNG


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_a_role_serves_with_the_youngest_generation_paced(
    thresholds: tuple[int, int, int],
) -> None:
    seen: list[tuple[int, int, int]] = []

    async def serve(config: Config) -> None:
        seen.append(gc.get_threshold())

    _run_role("controller", serve, None, False)
    assert seen == [(YOUNG, thresholds[1], thresholds[2])]
    assert thresholds[0] < YOUNG


def test_a_command_keeps_cpythons_pace() -> None:
    code = "import gc, xce.cli.main; print(gc.get_threshold()[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == 700
