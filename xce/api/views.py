"""Records to JSON: the shapes the API promises (see the OpenAPI document)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xce.core import gres
from xce.core.allocation import exec_host
from xce.core.deps import describe
from xce.core.model import (
    ArrayRecord,
    HostAdmin,
    HostRecord,
    JobRecord,
    JobState,
    QueueRecord,
    Usage,
)
from xce.core.state import ClusterState
from xce.sched.predict import Predictions, expected_of


def usage_view(usage: Usage | None, job: JobRecord | None = None, now: float = 0.0) -> dict:
    u = usage or Usage()
    wall = u.wall_time_s
    if job is not None and job.start_time is not None:
        end = job.end_time if job.end_time is not None else now
        wall = max(wall, end - job.start_time) if job.state.active or usage is None else wall
    return {
        "cpu_time_s": round(u.cpu_time_s, 3),
        "cpu_user_s": round(u.cpu_user_s, 3),
        "cpu_system_s": round(u.cpu_system_s, 3),
        "max_rss_bytes": u.max_rss_bytes,
        "wall_time_s": round(wall, 3),
        "gpu_util_pct": u.gpu_util_pct,  # NVML's, of the granted GPUs (0 without)
        "gpu_mem_peak_bytes": u.gpu_mem_peak_bytes,
    }


def job_view(
    job: JobRecord,
    reasons: Mapping[str, str],
    now: float,
    full: bool = False,
    predictions: Predictions | None = None,
) -> dict:
    """A job as the API shows it; with `predictions` (the controller's run-time history,
    xce/sched/predict.py) also its predicted run time and, running, its expected end."""
    spec = job.spec
    reason = job.reason
    if job.state is JobState.PEND:
        reason = reasons.get(job.id, reason)
    out: dict[str, Any] = {
        "id": job.id,
        "kind": "task" if job.array_index is not None else "job",
        "array_id": str(job.number) if job.array_index is not None else None,
        "array_index": job.array_index,
        "name": spec.name or (spec.command or "script").split("\n")[0][:40],
        "user": spec.user,
        "queue": spec.queue,
        "submit_host": spec.submit_host,
        "state": job.state.value,
        "host": job.host,
        # bjobs' EXEC_HOST (`2*n1:2*n2`) and every host with its slots
        "exec_host": exec_host(job) if job.host else None,
        # each host with its own device grant where it has one
        "hosts": [
            {
                "host": p.host,
                "slots": p.slots,
                **({"devices": list(p.devices)} if p.devices else {}),
            }
            for p in job.hosts
        ],
        "slots": spec.slots,
        "memory_mb": spec.memory_mb,
        "walltime_s": spec.walltime_s,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "reason": reason,
        "usage": usage_view(job.usage, job, now),
        # asked per host ({"gpu": 1}), licenses, and the device ids granted ("gpu:0")
        "gres": gres.counts_of(spec.gres) if spec.gres else {},
        "licenses": gres.counts_of(spec.licenses) if spec.licenses else {},
        "devices": list(job.devices),
    }
    if job.host_usage:  # a finished multi-host job: each host's part of `usage`
        out["host_usage"] = [
            {
                "host": h.host,
                "cpu_time_s": round(h.cpu_user_s + h.cpu_system_s, 3),
                "cpu_user_s": round(h.cpu_user_s, 3),
                "cpu_system_s": round(h.cpu_system_s, 3),
                "max_rss_bytes": h.max_rss_bytes,
            }
            for h in job.host_usage
        ]
    if full:
        out.update(
            command=spec.command,
            script=spec.script,
            env=dict(spec.env),
            cwd=spec.cwd,
            dependency=describe(spec.dependency),
            resources=spec.resources,
            inputs=list(spec.inputs),
            outputs=list(spec.outputs),
            output_files=list(job.outputs),
            # outputs the worker could not return ("NAME: why"); the reason counts them
            output_problems=list(job.output_problems),
            stdout_file=spec.stdout_file,
            stderr_file=spec.stderr_file,
            reservation=spec.reservation or None,
            priority=spec.priority,
            preempted_by=job.preempted_by or None,
            kill_requested=job.kill_requested,
            eligible_time=job.eligible_time,
            begin_time=spec.begin_time,
            exclusive=spec.exclusive,
            mem_per_slot_mb=spec.mem_per_slot_mb,
            submit_dir=spec.submit_dir,
            account=spec.account or None,
        )
    if predictions is not None:
        predicted, expected_end = expected_of(job, predictions, now)
        out["predicted_run_s"] = None if predicted is None else round(predicted, 1)
        out["expected_end"] = expected_end
    return out


def array_state(array: ArrayRecord, tasks: list[JobRecord]) -> str:
    """One state for a whole array: the most "alive" state among its tasks."""
    if array.active:
        if any(t.state is JobState.RUN for t in tasks):
            return JobState.RUN.value
        return JobState.USUSP.value
    if array.pending or any(t.state is JobState.PEND for t in tasks):
        return JobState.PSUSP.value if array.held else JobState.PEND.value
    if any(t.state is JobState.PSUSP for t in tasks):
        return JobState.PSUSP.value
    return JobState.DONE.value if array.exited == 0 else JobState.EXIT.value


def array_view(array: ArrayRecord, state: ClusterState, reasons: Mapping[str, str]) -> dict:
    tasks = state.tasks_of(array.id)
    spec = array.spec
    counts = {s.value: 0 for s in JobState}
    for t in tasks:
        counts[t.state.value] += 1
    counts[JobState.PSUSP.value if array.held else JobState.PEND.value] += len(array.pending)
    cancelled = array.exited - counts[JobState.EXIT.value]
    counts[JobState.EXIT.value] += max(cancelled, 0)
    return {
        "id": str(array.id),
        "kind": "array",
        "name": spec.name or (spec.command or "script").split("\n")[0][:40],
        "user": spec.user,
        "queue": spec.queue,
        "state": array_state(array, tasks),
        "submit_time": array.submit_time,
        "slots": spec.slots,
        "memory_mb": spec.memory_mb,
        "walltime_s": spec.walltime_s,
        "reason": reasons.get(str(array.id), ""),
        "array": {
            "spec": array.indices.describe(),
            "max_concurrent": array.max_concurrent,
            "total": array.total,
            "pending_not_started": len(array.pending),
            "held": array.held,
            "counts": counts,
        },
        "command": spec.command,
        "script": spec.script,
        "dependency": describe(spec.dependency),
        "eligible_time": array.eligible_time,
        "begin_time": spec.begin_time,
    }


def pending_rest_view(array: ArrayRecord, reasons: Mapping[str, str]) -> dict:
    """The tasks of an array that have not started yet, as one listing row."""
    spec = array.spec
    return {
        "id": f"{array.id}[{array.pending.describe()}]",
        "kind": "array_pending",
        "submit_host": spec.submit_host,
        "array_id": str(array.id),
        "array_index": None,
        "name": spec.name or (spec.command or "script").split("\n")[0][:40],
        "user": spec.user,
        "queue": spec.queue,
        "state": (JobState.PSUSP if array.held else JobState.PEND).value,
        "host": None,
        "slots": spec.slots,
        "memory_mb": spec.memory_mb,
        "walltime_s": spec.walltime_s,
        "submit_time": array.submit_time,
        "start_time": None,
        "end_time": None,
        "attempt": 0,
        "exit_code": None,
        "exit_signal": None,
        "reason": reasons.get(str(array.id), ""),
        "tasks": len(array.pending),
        "usage": usage_view(None),
    }


def queue_view(queue: QueueRecord, state: ClusterState) -> dict:
    pending = running = suspended = 0
    for job_id in state.pending:
        if state.jobs[job_id].spec.queue == queue.name:
            pending += 1
    for array_id in state.pending_arrays:
        array = state.arrays[array_id]
        if array.spec.queue == queue.name:
            pending += len(array.pending)
    for load in state.host_load.values():
        for job_id in load.jobs:
            job = state.jobs[job_id]
            if job.spec.queue == queue.name:
                if job.state is JobState.RUN:
                    running += 1
                else:
                    suspended += 1
    return {
        "name": queue.name,
        "priority": queue.priority,
        "open": queue.open,
        "active": queue.active,
        "status": f"{'Open' if queue.open else 'Closed'}:{'Active' if queue.active else 'Inact'}",
        "hosts": list(queue.hosts),
        "description": queue.description,
        "on_host_failure": queue.on_host_failure.value,
        "plugins": list(queue.plugins),
        "max_running": queue.max_running,
        "max_running_per_user": queue.max_running_per_user,
        "shares": {who: float(n) for who, n in queue.shares},
        "default_walltime_s": queue.default_walltime_s,
        "max_walltime_s": queue.max_walltime_s,
        "default_memory_mb": queue.default_memory_mb,
        "max_memory_mb": queue.max_memory_mb,
        "max_slots": queue.max_slots,
        "users": list(queue.users),
        "preempt": list(queue.preempt),
        "preempt_mode": queue.preempt_mode,
        "preempt_min_run_s": queue.preempt_min_run_s,
        "aliases": list(queue.aliases),
        "job_env": queue.job_env,
        "missing_submit_dir": queue.missing_submit_dir,
        "pending": pending,
        "running": running,
        "suspended": suspended,
    }


def containment_summary(containment: dict[str, Any] | None) -> str:
    """`{"kind": "v1", "memory": true, ..., "cores": 2}` -> "v1 (memory, ...; cores=2)".

    "unknown" for a worker that did not say (an older one, or none registered with this
    controller since it started)."""
    if not containment:
        return "unknown"
    kind = str(containment.get("kind", "?"))
    on = [k for k, v in containment.items() if k != "kind" and v is True]
    values = [
        f"{k}={v}"
        for k, v in containment.items()
        if k != "kind" and not isinstance(v, bool) and v is not None
    ]
    inside = ", ".join(on) + ("; " if on and values else "") + ", ".join(values)
    return f"{kind} ({inside})" if inside else kind


def host_view(
    host: HostRecord,
    state: ClusterState,
    load: dict[str, float] | None,
    liveness: dict[str, Any] | None = None,
    containment: dict[str, Any] | None = None,
    worker_version: str | None = None,
) -> dict:
    used = state.host_load.get(host.name)
    jobs = sorted(used.jobs) if used else []
    admin = host.admin.value
    if host.admin is HostAdmin.DRAINING and not jobs:
        admin = "drained"
    attrs = dict(host.attributes)
    return {
        "name": host.name,
        "status": host.status.value,
        "admin": admin,
        "admin_reason": host.admin_reason,
        "slots": host.slots,
        "slots_used": used.slots if used else 0,
        "memory_mb": host.memory_mb,
        "memory_used_mb": used.memory_mb if used else 0,
        "running_jobs": jobs,
        "attributes": attrs,
        "rack": attrs.get("rack"),
        "group": attrs.get("group"),
        "load": load or {},
        "registered_at": host.registered_at,
        "changed_at": host.changed_at,
        # Heartbeat age, deadline, fence and when a silent host's jobs are requeued
        # (xce/controller/workers.py, the fence rule).
        "liveness": liveness or {},
        "containment": containment or None,
        "containment_summary": containment_summary(containment),
        # The worker's build as it last registered; None: not since this controller
        # started, or a worker from before versions were sent.
        "worker_version": worker_version or None,
        # per kind: {"total": 2, "free": 1, "devices": ["0", "1"], "used": ["0"]}
        "gres": gres_view(host, used.devices if used else frozenset()),
    }


def gres_view(host: HostRecord, held: frozenset[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, ids in gres.host_devices(host.gres).items():
        used = [d for d in ids if gres.grant_name(kind, d) in held]
        out[kind] = {
            "total": len(ids),
            "free": len(ids) - len(used),
            "devices": list(ids),
            "used": used,
        }
    return out
