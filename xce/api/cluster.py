"""Cluster-wide routes: health, cluster status and the OpenAPI document."""

from __future__ import annotations

import msgspec
from aiohttp import web

from xce import __version__
from xce.api.http import CONFIG, HA, SERVICE, json_response, read_body
from xce.api.routes import Route
from xce.controller.service import ControllerService
from xce.core import versions
from xce.core.errors import Conflict
from xce.protocol.admin import Switchover, Vote


async def healthz(request: web.Request) -> web.Response:
    """Liveness, and what the other candidates need for elections (xce/ha/probe.py)."""
    node = request.app.get(HA)
    return json_response(node.health() if node is not None else {"status": "ok"})


async def cluster(request: web.Request) -> web.Response:
    service: ControllerService = request.app[SERVICE]
    config = request.app[CONFIG]
    state = service.state
    node = request.app.get(HA)
    return json_response(
        {
            "version": __version__,
            # what this build writes (xce/core/versions.py; docs/upgrades.md)
            "formats": {
                "wal": versions.WAL_FORMAT,
                "checkpoint": versions.CHECKPOINT_FORMAT,
                "replication": versions.REPLICATION_PROTOCOL,
                "worker_protocol": versions.WORKER_PROTOCOL,
            },
            "role": node.role if node is not None else "primary",
            "controllers": list(config.controllers),
            "jobs": len(state.jobs),
            "arrays": len(state.arrays),
            "pending": len(state.pending)
            + sum(len(state.arrays[n].pending) for n in state.pending_arrays),
            "hosts": len(state.hosts),
            "events_applied": state.applied,
            "scheduler": dict(service.stats),
            "ha": node.view() if node is not None else None,
        }
    )


async def switchover(request: web.Request) -> web.Response:
    """Move the primary role to a caught-up standby with no loss (`xce admin switchover`)."""
    node = request.app.get(HA)
    to = (await read_body(request, Switchover)).to if request.can_read_body else None
    if node is None or node.solo:
        raise Conflict("this cluster has a single controller candidate: nothing to switch to")
    answer = await node.switchover(to)
    return json_response(answer)


async def vote(request: web.Request) -> web.Response:
    """A candidate asks for this candidate's vote for an epoch (xce/ha/election.py)."""
    node = request.app.get(HA)
    if node is None or node.solo:
        raise Conflict("this cluster has a single controller candidate: nothing to vote on")
    body = msgspec.to_builtins(await read_body(request, Vote))
    return json_response(node.answer_vote(body))


async def openapi(request: web.Request) -> web.Response:
    from xce.api.openapi import document

    return json_response(document())


ROUTES = [
    Route("GET", "/healthz", healthz, "Liveness check", "public", "cluster"),
    Route("GET", "/api/v1/openapi.json", openapi, "This OpenAPI document", "public", "cluster"),
    Route(
        "GET",
        "/api/v1/cluster",
        cluster,
        "Cluster status: role, counts, scheduler stats",
        "cluster:view",
        "cluster",
    ),
    Route(
        "POST",
        "/api/v1/cluster/switchover",
        switchover,
        "Hand the primary role to a caught-up standby (body: optional to = its URL)",
        "cluster:admin",
        "cluster",
        body=Switchover,
    ),
    Route(
        "POST",
        "/api/v1/cluster/vote",
        vote,
        "A controller candidate asks for this one's vote for an epoch (HA elections)",
        "cluster:replicate",
        "cluster",
        body=Vote,
        any_role=True,
    ),
]
