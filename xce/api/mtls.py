"""Mutual TLS for worker routes: with `[tls] require_client_cert = "workers"` the listener asks
for a client certificate (optional in the handshake, verified against tls.ca_file when
offered) and this middleware refuses worker routes to a connection that presented none.

Users' CLIs and browsers need no certificate then; with `"all"` the handshake itself demands
one from everybody and this middleware has nothing left to do.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from xce.api.http import CONFIG
from xce.api.route_class import WORKER, route_class
from xce.core.errors import Forbidden


class ClientCertificateRequired(Forbidden):
    code = "client_certificate_required"


@web.middleware
async def worker_client_cert(request: web.Request, handler: Any) -> web.StreamResponse:
    tls = request.app[CONFIG].tls
    if tls.require_client_cert == "workers" and route_class(request) == WORKER:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if not peer:
            raise ClientCertificateRequired(
                f"{request.method} {request.path} is a worker route and needs a client "
                "certificate signed by the cluster CA (tls.cert_file / tls.key_file)"
            )
    return await handler(request)
