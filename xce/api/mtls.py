"""Mutual TLS for worker routes: with `[tls] require_client_cert = "workers"` the listener asks
for a client certificate (optional in the handshake, verified against tls.ca_file when
offered) and `require_client_cert` refuses worker routes to a connection that presented none.

Users' CLIs and browsers need no certificate then; with `"all"` the handshake itself demands
one from everybody and this check has nothing left to do.
"""

from __future__ import annotations

from aiohttp import web

from xce.api.http import CONFIG
from xce.api.route_class import WORKER, route_class
from xce.core.errors import Forbidden


class ClientCertificateRequired(Forbidden):
    code = "client_certificate_required"


def require_client_cert(request: web.Request) -> None:
    """Refuse a worker route to a connection without a client certificate, when
    `require_client_cert = "workers"`. A check the application's `authenticate` middleware
    makes first (xce/api/app.py), not a middleware of its own: one frame less per request."""
    tls = request.app[CONFIG].tls
    if tls.require_client_cert == "workers" and route_class(request) == WORKER:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if not peer:
            raise ClientCertificateRequired(
                f"{request.method} {request.path} is a worker route and needs a client "
                "certificate signed by the cluster CA (tls.cert_file / tls.key_file)"
            )
