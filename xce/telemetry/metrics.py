"""Prometheus metrics of one XCE process (`GET /metrics`, Prometheus text format).

Counters and histograms that code observes as things happen live here, on a registry of
their own (not prometheus_client's global one, so nothing a library registers leaks in).
Gauges that are pure functions of the controller's state (jobs by state and queue, hosts by
status) are not kept here: `xce.api.metrics` reads them from the state's own indexes at
scrape time, so they can never drift from the truth.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from xce.telemetry.loop_histogram import LoopHistogram

REGISTRY = CollectorRegistry(auto_describe=True)

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Observed on every request, only on the event loop's thread: no locks
# (xce/telemetry/loop_histogram.py).
API_LATENCY = LoopHistogram(
    "xce_api_request_seconds",
    "API request latency by route template, method and status",
    ("method", "route", "status"),
    _FAST,
    REGISTRY,
)
SUBMISSIONS = Counter(
    "xce_submissions",
    "Accepted submissions (a job array counts once under kind=array)",
    ("kind",),
    registry=REGISTRY,
)
SCHEDULING_PASS = Histogram(
    "xce_scheduling_pass_seconds",
    "Duration of one scheduling pass (plan + commit)",
    buckets=_FAST,
    registry=REGISTRY,
)
DISPATCHED = Counter("xce_dispatched_jobs", "Jobs placed on hosts", registry=REGISTRY)
WAL_FSYNC = Histogram(
    "xce_wal_fsync_seconds",
    "Write + fdatasync time of one WAL group",
    buckets=_FAST,
    registry=REGISTRY,
)
WAL_GROUP = Histogram(
    "xce_wal_group_records",
    "Records made durable by one fdatasync (group commit)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096),
    registry=REGISTRY,
)
CHECKPOINT = Histogram(
    "xce_checkpoint_seconds",
    "Duration of a checkpoint (copy, encode, write, fsync)",
    buckets=_SLOW,
    registry=REGISTRY,
)
CHECKPOINT_PAUSE = Histogram(
    "xce_checkpoint_loop_pause_seconds",
    "Event-loop pause of a checkpoint's state copy",
    buckets=_FAST,
    registry=REGISTRY,
)
REPLICATION_LAG = Gauge(
    "xce_replication_lag_records",
    "WAL records the standby has not yet acknowledged",
    ("standby",),
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "xce_rate_limited_requests",
    "Requests refused by the guard (address_denied, rate_limited, login_locked)",
    ("reason",),
    registry=REGISTRY,
)
EPOCH = Gauge("xce_epoch", "The epoch (primary term) this controller knows", registry=REGISTRY)
SYNC_DEGRADED = Counter(
    "xce_replication_sync_degraded",
    "Times sync replication fell back to async (timeouts)",
    registry=REGISTRY,
)
ACCT_RECORDS = Counter(
    "xce_accounting_records",
    "Accounting records stored (one per ended attempt)",
    registry=REGISTRY,
)
ACCT_WRITE_FAILURES = Counter(
    "xce_accounting_write_failures",
    "Accounting store writes that failed (retried with the same records)",
    registry=REGISTRY,
)
ACCT_BACKLOG = Gauge(
    "xce_accounting_backlog",
    "Accounting records derived but not yet stored",
    registry=REGISTRY,
)
FILE_BYTES_SENT = Counter(
    "xce_file_sent_bytes",
    "Bytes of job files sent in answers, by route kind (input: to workers; output: downloads)",
    ("kind",),
    registry=REGISTRY,
)
FILE_BYTES_RECEIVED = Counter(
    "xce_file_received_bytes",
    "Bytes of job files received in requests, by route kind (upload; output: from workers)",
    ("kind",),
    registry=REGISTRY,
)
FILE_NOT_MODIFIED = Counter(
    "xce_file_not_modified",
    "File requests answered 304 (the client's copy, named by its SHA-256, is current)",
    ("kind",),
    registry=REGISTRY,
)


_CHILDREN: dict[tuple[int, tuple[str, ...]], Any] = {}


def labelled(metric: Counter | Histogram, *values: str) -> Any:
    """`metric.labels(*values)`, looked up once per label set: `labels()` validates the
    values and takes the metric's lock on every call, a few microseconds on each request's
    path. Only for metrics whose children are never removed (`remove`/`clear` would leave a
    stale child here); the label sets must be bounded (route templates, statuses, kinds)."""
    key = (id(metric), values)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*values)
    return child
