"""A real controller and worker: `/metrics` shows the durable path at work, logs are JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster import Cluster


def _values(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + ("" if not s.labels else str(sorted(s.labels.items())))
            out[key] = s.value
    return out


def test_metrics_and_json_logs_of_a_real_controller(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XCE_LOG_FORMAT", "json")
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    cluster.start_worker("w1")
    try:
        job = cluster.submit(command="true")
        cluster.wait_state(job, "DONE")
        values = _values(cluster.get("/metrics").decode())
        assert values["xce_wal_fsync_seconds_count"] >= 1
        assert values["xce_wal_group_records_sum"] >= values["xce_wal_group_records_count"]
        assert values["xce_scheduling_pass_seconds_count"] >= 1
        assert values["xce_dispatched_jobs_total"] == 1
        assert values["xce_jobs[('queue', 'normal'), ('state', 'DONE')]"] == 1
        assert values["xce_hosts[('status', 'online')]"] == 1
    finally:
        cluster.stop()
    lines = [
        line
        for line in (tmp_path / "c" / "controller.log").read_text().splitlines()
        if line.startswith("{")
    ]
    entries = [json.loads(line) for line in lines]
    assert any("listening" in e["message"] for e in entries)
    assert all({"time", "level", "logger", "message", "pid"} <= e.keys() for e in entries)
    assert all(e["pid"] != os.getpid() for e in entries)


def test_json_log_lines_carry_the_request_id() -> None:
    import logging

    from xce.telemetry.logs import REQUEST_ID, JsonFormatter, _RequestIdFilter

    record = logging.LogRecord("xce.api", logging.ERROR, __file__, 1, "boom %s", ("x",), None)
    token = REQUEST_ID.set("abc123")
    try:
        _RequestIdFilter().filter(record)
    finally:
        REQUEST_ID.reset(token)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["request_id"] == "abc123"
    assert entry["message"] == "boom x"
    assert entry["level"] == "ERROR"
