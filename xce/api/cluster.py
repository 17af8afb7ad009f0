"""Cluster-wide routes: health, cluster status and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from xce import __version__
from xce.api.http import CONFIG, SERVICE, json_response
from xce.api.routes import Route
from xce.controller.service import ControllerService


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def cluster(request: web.Request) -> web.Response:
    service: ControllerService = request.app[SERVICE]  # type: ignore[assignment]
    config = request.app[CONFIG]
    state = service.state
    return json_response(
        {
            "version": __version__,
            "role": "primary",
            "controllers": list(config.controllers),  # type: ignore[attr-defined]
            "jobs": len(state.jobs),
            "arrays": len(state.arrays),
            "pending": len(state.pending) + sum(len(state.arrays[n].pending)
                                                for n in state.pending_arrays),
            "hosts": len(state.hosts),
            "events_applied": state.applied,
            "scheduler": dict(service.stats),
        }
    )


async def openapi(request: web.Request) -> web.Response:
    from xce.api.openapi import document

    return json_response(document())


ROUTES = [
    Route("GET", "/healthz", healthz, "Liveness check", "public", "cluster"),
    Route("GET", "/api/v1/openapi.json", openapi, "This OpenAPI document", "public", "cluster"),
    Route("GET", "/api/v1/cluster", cluster, "Cluster status: role, counts, scheduler stats",
          "cluster:view", "cluster"),
]
