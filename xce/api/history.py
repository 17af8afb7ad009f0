"""History routes: the cluster's sampled ring and a job's CPU and memory over its attempt.

Both answer from memory that the controller keeps small and fixed
(xce/controller/cluster_history.py, xce/controller/usage_series.py), so a console that
polls them costs the controller O(samples) per request, never a walk of jobs or hosts.
"""

from __future__ import annotations

from aiohttp import web

from xce.api.access import require_job
from xce.api.http import CLUSTER_HISTORY, SERVICE, USAGE, json_response, query_int
from xce.api.routes import Param, Route
from xce.core.errors import InvalidRequest, NotFound
from xce.core.state_base import parse_job_id
from xce.protocol.schemas import ClusterHistoryView, UsageSeriesView

MAX_MINUTES = 525_600  # a year: asking for more than the ring holds answers what it holds


async def cluster_history(request: web.Request) -> web.Response:
    history = request.app[CLUSTER_HISTORY]
    window_min = (history.size - 1) * history.step // 60 + 1
    # more than the ring holds is all it holds
    minutes = min(query_int(request, "minutes", window_min, 1, MAX_MINUTES), window_min)
    queue = request.query.get("queue") or None
    step = query_int(request, "step", history.step, 1, 86_400)
    if step % history.step:
        raise InvalidRequest(
            f"query parameter step must be a multiple of {history.step} (history_step_s), "
            f"got {step}"
        )
    known = history.queues
    if queue is not None and queue not in known and queue not in request.app[SERVICE].state.queues:
        raise NotFound(f"queue {queue!r} does not exist")
    return json_response(
        {
            "step_s": step,
            "window_s": (history.size - 1) * history.step,
            "queue": queue,
            "rebuilt": history.rebuilt,
            "samples": history.samples(minutes, queue, step),
        }
    )


async def job_usage(request: web.Request) -> web.Response:
    job_id = request.match_info["job_id"]
    require_job(request, job_id, "job:view")
    state = request.app[SERVICE].state
    number, index = parse_job_id(job_id)
    if index is None and number in state.arrays:
        raise InvalidRequest(f"job {job_id} is a job array: name one of its tasks")
    job = state.job(job_id)
    return json_response(
        {
            "job_id": job.id,
            "attempt": job.attempt,
            "state": job.state.value,
            **request.app[USAGE].view(job.id, job.attempt),
        }
    )


ROUTES = [
    Route(
        "GET",
        "/api/v1/cluster/history",
        cluster_history,
        "The cluster's sampled history (24 h ring): running, pending, slots, GPUs, "
        "submitted and finished per step, for the cluster or one queue",
        "cluster:view",
        "cluster",
        response=ClusterHistoryView,
        query=(
            Param(
                "minutes",
                "only the last this many minutes (default: all the ring holds)",
                {"type": "integer", "minimum": 1, "maximum": MAX_MINUTES},
            ),
            Param("queue", "one queue's samples instead of the cluster's"),
            Param(
                "step",
                "aggregate to this step, seconds (a multiple of history_step_s): gauges at "
                "each boundary, counters summed",
                {"type": "integer", "minimum": 1, "maximum": 86_400},
            ),
        ),
    ),
    Route(
        "GET",
        "/api/v1/jobs/{job_id}/usage",
        job_usage,
        "A job's CPU seconds and memory peak over its current attempt (bounded series)",
        "job:view",
        "jobs",
        response=UsageSeriesView,
    ),
]
