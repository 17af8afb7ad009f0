"""Job routes: `PATCH /api/v1/jobs/{job_id}` (xce job modify, like bmod /
scontrol update) and `GET /api/v1/priority` (xce job priority, like sprio)."""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web

from xce.api.access import require_job, visible_owners
from xce.api.http import PLUGINS, SERVICE, identity, json_response, read_body
from xce.api.routes import Param, Route
from xce.api.views import array_view, job_view
from xce.controller.service import ControllerService
from xce.core.rbac import job_scope
from xce.core.state_base import parse_job_id
from xce.protocol.bodies import AT_LEAST_ONE, JobModify, given
from xce.sched.priority import factors, scale_of, usage_of
from xce.sched.snapshot import PendingArray, PendingJob, snapshot_of


def _service(request: web.Request) -> ControllerService:
    return request.app[SERVICE]


async def modify(request: web.Request) -> web.Response:
    body = given(await read_body(request, JobModify))
    job_id = request.match_info["job_id"]
    require_job(request, job_id, "job:control")
    who = identity(request)
    privileged = job_scope(who.permissions, "job:control") == "all"
    defer = bool(body.pop("defer", False))
    service = _service(request)
    events = await service.modify_job(job_id, body, privileged, visible_owners(request), defer)
    number, index = parse_job_id(job_id)
    if index is None and number in service.state.arrays:
        view = array_view(service.state.arrays[number], service.state, service.reasons)
    else:
        view = job_view(service.state.job(job_id), service.reasons, service.clock(), full=True)
    view["changed"] = bool(events)
    return json_response(view)


async def priority(request: web.Request) -> web.Response:
    """Each pending job's multifactor factors (xce/sched/priority.py), highest first."""
    service = _service(request)
    state, now = service.state, service.clock()
    settings = service.settings.scheduler.priority
    snapshot = snapshot_of(state, service.usage.usage(now), service.settings.scheduler.group_map())
    hours, slots = usage_of(snapshot.usage, snapshot.running, now)
    scale = scale_of(state.queues, [h.slots for h in snapshot.hosts])
    visible = visible_owners(request)
    registry = request.app[PLUGINS]
    user, queue_name = request.query.get("user"), request.query.get("queue")
    rows: list[dict[str, Any]] = []
    items: tuple[PendingJob | PendingArray, ...] = (*snapshot.jobs, *snapshot.arrays)
    for item in items:
        spec = item.spec
        if (
            (visible is not None and not visible(spec.user))
            or (user and spec.user != user)
            or (queue_name and spec.queue != queue_name)
        ):
            continue
        queue = state.queues[spec.queue]
        f = factors(spec, item.submit_time, queue, settings, scale, now, hours, slots)
        rows.append(
            {
                "job_id": getattr(item, "job_id", str(item.number)),
                "user": spec.user,
                "queue": spec.queue,
                "order": registry.policy_for(queue.plugins).order.name,
                "job_priority": settings.default_job_priority
                if spec.priority is None
                else spec.priority,
                "priority": round(f.priority, 3),
                "factors": {
                    "queue": round(f.queue, 4),
                    "job": round(f.job, 4),
                    "age": round(f.age, 4),
                    "fairshare": round(f.fairshare, 4),
                    "size": round(f.size, 4),
                },
            }
        )
    rows.sort(key=lambda r: (-r["priority"], r["job_id"]))
    weights = {
        k.removeprefix("weight_"): getattr(settings, k)
        for k in ("weight_queue", "weight_job", "weight_age", "weight_fairshare", "weight_size")
    }
    return json_response(
        {
            "jobs": rows,
            "weights": weights,
            "default_job_priority": settings.default_job_priority,
            "max_job_priority": settings.max_job_priority,
            "max_age_s": settings.max_age_s,
        }
    )


ROUTES = [
    Route(
        "PATCH",
        "/api/v1/jobs/{job_id}",
        modify,
        "Modify a pending job (priority, queue, walltime, slots, memory, resources, "
        "dependency, name, hold) or a running one (name; walltime for operators)",
        "job:control",
        "jobs",
        body=Annotated[JobModify, AT_LEAST_ONE],
    ),
    Route(
        "GET",
        "/api/v1/priority",
        priority,
        "Multifactor priority of each pending job, factor by factor (like sprio)",
        "job:view",
        "jobs",
        query=(Param("user", "only this user's jobs"), Param("queue", "only this queue")),
    ),
]
