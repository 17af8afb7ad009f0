"""The lock-free latency histogram writes what prometheus_client's `Histogram` writes."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from xce.telemetry.loop_histogram import LoopHistogram

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _exposition(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def test_same_samples_as_a_prometheus_histogram() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("lat_seconds", "latency", ("route", "status"), BUCKETS, ours)
    ref = Histogram("lat_seconds", "latency", ("route", "status"), buckets=BUCKETS, registry=theirs)
    observations = [
        ("/a", "200", 0.0001),
        ("/a", "200", 0.0005),  # exactly on a bound: le is inclusive
        ("/a", "200", 0.0006),
        ("/a", "404", 3.0),
        ("/a", "404", 10.0),  # above the last bound: +Inf only
        ("/b", "201", 0.7),
    ]
    for route, status, seconds in observations:
        loop.labels(route, status).observe(seconds)
        ref.labels(route, status).observe(seconds)
    assert _exposition(ours) == _exposition(theirs)
    assert ours.get_sample_value("lat_seconds_count", {"route": "/a", "status": "200"}) == 3
    assert (
        ours.get_sample_value("lat_seconds_bucket", {"route": "/a", "status": "404", "le": "5.0"})
        == 1
    )
    assert ours.get_sample_value("lat_seconds_sum", {"route": "/b", "status": "201"}) == 0.7


def test_children_are_kept_per_label_set_and_labels_are_checked() -> None:
    loop = LoopHistogram("x_seconds", "x", ("route",), BUCKETS, CollectorRegistry())
    assert loop.labels("/a") is loop.labels("/a")
    assert loop.labels("/a") is not loop.labels("/b")
    with pytest.raises(ValueError, match="takes labels"):
        loop.labels("/a", "extra")


def test_the_name_is_registered_once() -> None:
    registry = CollectorRegistry()
    LoopHistogram("dup_seconds", "x", (), BUCKETS, registry)
    with pytest.raises(ValueError):
        Histogram("dup_seconds", "x", registry=registry)
