"""Returning outputs while no controller answers: the files stay pending for the report
loop's next pass (never reported as refused), and such passes do not count against the
passes before the worker gives up on them (a real XceClient against a closed port)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.worker.local_host import LocalHost
from xce.client import ApiError, XceClient
from xce.client.transfer import is_final
from xce.worker.attempt import readers, staging


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_transfer_that_used_up_its_tries_may_be_tried_again_later() -> None:
    assert not is_final(ApiError(0, "transfer_failed", "output stdout: ...; gave up after 6 tries"))
    assert not is_final(ApiError(0, "unreachable", "no controller answered"))
    assert is_final(ApiError(413, "too_large", "output big.out is 2 GB, over ..."))


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs as root need a root worker")
async def test_outputs_wait_for_a_controller_that_is_down(tmp_path: Path) -> None:
    host = LocalHost(tmp_path)
    client = XceClient([f"http://127.0.0.1:{closed_port()}"])
    try:
        job = await host.start({"command": "echo out; echo err >&2"})
        assert (await host.wait(job)).exit_code == 0
        await staging.copy_std_files(job)
        outcome = await staging.upload_outputs(client, "h1", job)
        readers.close_readers(job)
        # ended at the first "unreachable", not after the client's tries: the report loop
        # has its own schedule (a gave-up transfer's message would say "gave up after")
        assert "gave up" not in outcome.error
        assert outcome.problems == [] and outcome.returned == []
        assert set(outcome.pending) == {"stdout", "stderr"} and outcome.unreachable
        assert "no controller answered" in outcome.error
    finally:
        await client.close()
        host.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs as root need a root worker")
async def test_many_skipped_outputs_make_one_worker_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job that leaves 200 files the worker must skip (names that are not UTF-8) or refuse
    (over the cap per file) costs the worker's log one line, not 200; each file is still
    named in the attempt's problems."""
    host = LocalHost(tmp_path)
    client = XceClient([f"http://127.0.0.1:{closed_port()}"])
    make = (
        "echo out; echo err >&2; for i in $(seq 100); do echo data > big$i.dat; "
        "printf x > \"$(printf 'bad\\377%s.dat' $i)\"; done"
    )
    try:
        job = await host.start({"command": make, "outputs": ["*.dat"]})
        assert (await host.wait(job)).exit_code == 0
        await staging.copy_std_files(job)
        caplog.set_level("WARNING", logger="xce")
        limits = staging.OutputLimits(file_bytes=2, job_bytes=10**9)
        outcome = await staging.upload_outputs(client, "h1", job, limits)
        readers.close_readers(job)
        assert len(outcome.problems) == 202, outcome.problems  # stdout, stderr, 200 files
        assert sum("not UTF-8" in p for p in outcome.problems) == 100
        assert outcome.returned == [] and outcome.pending == []
        lines = [r.getMessage() for r in caplog.records if job.key[0] in r.getMessage()]
        assert len(lines) == 1, lines
        assert "202 output problems" in lines[0] and "xce job show" in lines[0], lines
    finally:
        await client.close()
        host.close()
