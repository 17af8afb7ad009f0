"""Fixed data for screenshots: a small cluster frozen at one instant (no clock, no network)."""

from __future__ import annotations

from typing import Any

from xce.console import fmt
from xce.console.app import XceTui

NOW = 1_790_000_000.0  # 2026-09-21 ... UTC; every run time is measured against it


def _job(
    job_id: str,
    state: str,
    user: str,
    queue: str,
    host: str | None,
    name: str,
    start: float | None = None,
    cpu: float = 0.0,
    rss: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    row = {
        "id": job_id,
        "kind": "job",
        "array_id": None,
        "array_index": None,
        "name": name,
        "user": user,
        "queue": queue,
        "state": state,
        "host": host,
        "slots": 1,
        "memory_mb": 0,
        "walltime_s": None,
        "submit_time": NOW - 7200,
        "start_time": start,
        "end_time": None,
        "attempt": 1 if start else 0,
        "exit_code": None,
        "exit_signal": None,
        "reason": "",
        "submit_host": "login1",
        "usage": {
            "cpu_time_s": cpu,
            "cpu_user_s": cpu * 0.9,
            "cpu_system_s": cpu * 0.1,
            "max_rss_bytes": rss,
            "wall_time_s": 0.0,
        },
    }
    row.update(extra)
    return row


def jobs() -> list[dict[str, Any]]:
    rows = [
        _job(
            "101",
            "RUN",
            "alice",
            "long",
            "n001",
            "train-model",
            NOW - 5400,
            10_500.0,
            3 * 2**30,
            history=[
                {
                    "at": NOW - 7200,
                    "event": "submitted",
                    "detail": "to queue long by alice from login1",
                },
                {"at": NOW - 6000, "event": "started", "detail": "on n002 (attempt 0)"},
                {"at": NOW - 5500, "event": "host_lost", "detail": "host n002 became unavailable"},
                {"at": NOW - 5500, "event": "requeued", "detail": "attempt 1 waits"},
                {"at": NOW - 5400, "event": "started", "detail": "on n001 (attempt 1)"},
            ],
        ),
        _job(
            "102", "PEND", "bob", "normal", None, "preprocess", reason="all online hosts are full"
        ),
        _job("103", "USUSP", "alice", "normal", "n002", "render", NOW - 600, 300.0, 2**28),
        _job(
            "104",
            "DONE",
            "carol",
            "short",
            "n001",
            "checksum",
            NOW - 900,
            12.5,
            2**24,
            end_time=NOW - 880,
            exit_code=0,
        ),
        _job(
            "105",
            "EXIT",
            "bob",
            "normal",
            "n003",
            "bad-input",
            NOW - 300,
            1.0,
            2**20,
            end_time=NOW - 299,
            exit_code=2,
        ),
    ]
    for index in (1, 2):
        rows.append(
            _job(
                f"106[{index}]",
                "RUN",
                "dave",
                "long",
                f"n00{index}",
                "sweep",
                NOW - 120,
                100.0 * index,
                2**26,
                array_id="106",
                array_index=index,
                kind="task",
            )
        )
    rows.append(
        {
            **_job("106[3-10]", "PEND", "dave", "long", None, "sweep"),
            "kind": "array_pending",
            "array_id": "106",
            "tasks": 8,
        }
    )
    return rows


def hosts() -> dict[str, dict[str, Any]]:
    out = {}
    for i, (rack, group, status, admin) in enumerate(
        [
            ("r1", "gpu", "online", "open"),
            ("r1", "gpu", "online", "closed"),
            ("r2", "cpu", "unavailable", "open"),
            ("r2", "cpu", "online", "draining"),
        ],
        start=1,
    ):
        name = f"n00{i}"
        out[name] = {
            "name": name,
            "status": status,
            "admin": admin,
            "admin_reason": "",
            "slots": 8,
            "slots_used": [3, 1, 0, 2][i - 1],
            "memory_mb": 65536,
            "memory_used_mb": 4096 * i,
            "running_jobs": [],
            "attributes": {"rack": rack, "group": group, "type": "X86_64"},
            "rack": rack,
            "group": group,
            "load": {"load1": 0.5 * i},
            # a rolling upgrade half done: n001-n002 upgraded, n004 not yet, n003 unknown
            "worker_version": ["0.2.0", "0.2.0", None, "0.1.0"][i - 1],
        }
    return out


def queues() -> dict[str, dict[str, Any]]:
    rows = [
        ("short", 50, True, True, 0, 0, 0),
        ("normal", 30, True, False, 1, 0, 1),
        ("long", 20, False, True, 8, 3, 0),
    ]
    return {
        name: {
            "name": name,
            "priority": prio,
            "open": is_open,
            "active": active,
            "status": f"{'Open' if is_open else 'Closed'}:{'Active' if active else 'Inact'}",
            "hosts": [],
            "description": f"{name} jobs",
            "on_host_failure": "requeue",
            "pending": pend,
            "running": run,
            "suspended": susp,
        }
        for name, prio, is_open, active, pend, run, susp in rows
    }


def sample_app() -> XceTui:
    """The console with the sample data, not connected to anything (no banner, no I/O)."""
    fmt.UTC = True
    app = XceTui(
        ["http://127.0.0.1:6820", "http://127.0.0.2:6820"], "t", clock=lambda: NOW, live=False
    )
    app.jobs.load(jobs())
    app.hosts = hosts()
    app.queues = queues()
    app.reservations = {
        "maint": {
            "name": "maint",
            "state": "waiting",
            "hosts": ["n001", "n002"],
            "slots": None,
            "start": NOW + 86400,
            "end": NOW + 90000,
            "users": [],
            "maintenance": True,
            "flags": [],
        },
        "team": {
            "name": "team",
            "state": "active",
            "hosts": ["n003"],
            "slots": 2,
            "start": NOW - 3600,
            "end": NOW + 3600,
            "users": ["alice", "@physics"],
            "maintenance": False,
            "flags": ["overlap"],
        },
    }
    app.cluster_info = {
        "version": "0.1.0",
        "role": "primary",
        "controllers": app.controllers,
        "jobs": 7,
        "arrays": 1,
        "pending": 9,
        "hosts": 4,
        "events_applied": 1234,
        "scheduler": {"dispatched": 42, "last_pass_ms": 1.5, "scheduling_passes": 99},
    }
    app.connection = "ok"
    return app
