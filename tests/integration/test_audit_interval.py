"""Under `wal_fsync = "interval"` an accepted submission's audit record waits for the next
group; a controller that stops cleanly writes it before it exits (a real process)."""

from __future__ import annotations

import json
from pathlib import Path

from .cluster import Cluster


def test_a_clean_stop_writes_the_waiting_submission_records(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    # An interval far longer than the test: only the stop can write the record (and the
    # WAL's, which the stop writes at once too).
    cluster.extra_controller = 'wal_fsync = "interval"\nwal_fsync_interval_s = 600.0'
    cluster.start_controller()
    audit = cluster.root / "controller" / "audit.log"
    try:
        job = cluster.submit(command="true")
        text = audit.read_bytes() if audit.exists() else b""
        assert b"job.submit" not in text  # answered before its record was written
    finally:
        cluster.stop()
    assert cluster.controller is not None and cluster.controller.returncode == 0
    records = [json.loads(line) for line in audit.read_bytes().splitlines()]
    submitted = [r for r in records if r["action"] == "job.submit"]
    assert [(r["object"], r["outcome"]) for r in submitted] == [(f"job:{job}", "ok")]
