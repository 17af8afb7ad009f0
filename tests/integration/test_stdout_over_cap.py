"""A job whose stdout is over the controller's cap: the file is not kept, and every way a
user asks for it (download, `xce job output`, `xce job peek`, the job itself) says why,
rather than showing an empty or missing file with no reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.test_file_transfers_e2e import _cli, _get


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Cluster]:
    """A controller that keeps at most 1 MB of outputs per job, and one worker."""
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "max_job_outputs_mb = 1\n"
    c.start_controller()
    c.start_worker("w1", slots=1)
    try:
        yield c
    finally:
        c.stop()


def test_stdout_over_the_cap_says_why_wherever_it_is_asked_for(capped: Cluster) -> None:
    job_id = capped.submit(command="head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2")
    job = capped.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert "stdout" in job["reason"] and "max_job_outputs_mb" in job["reason"], job

    status, _, raw = _get(capped, f"/api/v1/jobs/{job_id}/files/stdout", {})
    assert status == 404, raw
    assert b"not returned" in raw and b"max_job_outputs_mb" in raw, raw

    printed = _cli(capped.url, capped.root, "job", "output", job_id)
    assert printed.returncode != 0 and printed.stdout == b""
    lines = printed.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "max_job_outputs_mb" in lines[0], lines

    peeked = _cli(capped.url, capped.root, "job", "peek", job_id)
    assert peeked.returncode == 0, peeked.stderr
    assert b"stdout was not returned" in peeked.stderr, peeked.stderr
    assert b"max_job_outputs_mb" in peeked.stderr, peeked.stderr

    # stderr came back: it is served as before, with no reason attached.
    status, _, raw = _get(capped, f"/api/v1/jobs/{job_id}/files/stderr", {})
    assert status == 200 and raw == b"done\n"
    tail = capped.get(f"/api/v1/jobs/{job_id}/tail?stream=stderr")
    assert tail["data"] == "done\n" and "not_returned" not in tail, tail
