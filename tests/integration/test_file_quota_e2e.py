"""The quota by owner through a real controller process on 127.0.0.1: uploads attached to
held jobs stay on it, a kill before the job started frees them, `xce admin files` shows the
figures, and a controller killed with SIGKILL comes back with the same figures (and without
the files of jobs its records no longer hold)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN, ApiFailure, Cluster

MB = 1024 * 1024


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A controller with a 5 MB quota per user and no worker: nothing ever runs."""
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "upload_quota_mb = 5\n"
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


def _held_job(c: Cluster, data: bytes) -> str:
    upload = c.request("POST", "/api/v1/uploads", raw=data, token=USER_TOKEN)
    body = {"user": "alice", "command": "cat in", "inputs": {"in": upload["upload_id"]}}
    return str(c.post("/api/v1/jobs", {**body, "hold": True}, token=USER_TOKEN)["job_id"])


def _cli(c: Cluster, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_TOKEN": token, "HOME": str(c.root)}
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", c.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_held_jobs_files_stay_on_the_quota_across_a_crash(cluster: Cluster) -> None:
    jobs = [_held_job(cluster, bytes([n]) * 2 * MB) for n in range(2)]
    with pytest.raises(ApiFailure) as refused:
        cluster.request("POST", "/api/v1/uploads", raw=b"x" * 2 * MB, token=USER_TOKEN)
    assert refused.value.status == 413
    message = refused.value.body["error"]["message"]
    assert message.startswith("upload: 2.0 MB would take alice over the quota")
    assert "limit is 5.0 MB" in message and "upload_quota_mb" in message

    shown = _cli(cluster, ADMIN_TOKEN, "admin", "files")
    assert shown.returncode == 0, shown.stderr
    head, row = shown.stdout.split("\n")[:2]
    assert head.split() == ["USER", "FILES", "BYTES", "SIZE", "QUOTA", "USED"]
    assert row.split() == ["alice", "2", str(4 * MB), "4.0", "MB", "5.0", "MB", "80.0%"]
    denied = _cli(cluster, USER_TOKEN, "admin", "files")
    assert denied.returncode != 0 and "file:admin" in denied.stderr

    # Killing a held job frees its inputs, on the disk too.
    files = cluster.root / "controller" / "files" / "jobs"
    cluster.post(f"/api/v1/jobs/{jobs[0]}/kill", token=USER_TOKEN)
    before = cluster.get("/api/v1/files/usage")["users"]
    assert before == [
        {"user": "alice", "files": 1, "bytes": 2 * MB, "quota_bytes": 5 * MB, "used_pct": 40.0}
    ]
    cluster.wait_for(lambda: not (files / jobs[0] / "inputs").exists(), what="inputs deleted")

    # A crash, and a directory no record holds (left by a controller that died between a
    # purge and its deletion): the restarted controller counts what its records hold.
    orphan = files / "999" / "outputs" / "999"
    orphan.mkdir(parents=True)
    (orphan / "out").write_bytes(b"o" * MB)
    cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    cluster.controller.wait(10)  # type: ignore[union-attr]
    cluster.start_controller()
    assert cluster.get("/api/v1/files/usage")["users"] == before
    assert not (files / "999").exists()
    assert (files / jobs[1] / "inputs" / "in").read_bytes() == bytes([1]) * 2 * MB
    cluster.request("POST", "/api/v1/uploads", raw=b"y" * 2 * MB, token=USER_TOKEN)
    with pytest.raises(ApiFailure) as refused:
        cluster.request("POST", "/api/v1/uploads", raw=b"z" * 2 * MB, token=USER_TOKEN)
    assert refused.value.status == 413
