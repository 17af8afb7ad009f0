"""Joining a node to the cluster: a one-time join token buys the CA, the candidate list and
the settings a new worker (or standby) needs.

Routes:
* `GET /api/v1/join/ca` (public): the cluster CA certificate and its SHA-256. A joining node
  fetches it over an unverified connection and accepts it only if the hash matches the one
  printed with the join token (like kubeadm's discovery hash), then verifies everything else
  against it.
* `POST /api/v1/join` (public; the join token is the credential): redeems the token (once)
  and answers the role, the controller candidates, the CA, a *service token* of its own for
  the node (a JWT from the controller's `TokenService`: subject = the node's name, role
  worker or standby as the join token says, so `xce token revoke --user NAME` shuts out just
  that node) and, when the controller holds the CA key next to `tls.ca_file`, a client
  certificate + key issued for the node's name (mutual TLS for worker routes). Every
  redemption, refused ones included, goes to the audit log (`node.join`).
* `POST /api/v1/join/tokens` (`cluster:admin`): a new join token (`xce token join`).
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from xce.api.http import AUTH, CONFIG, SETTINGS, json_response, read_body
from xce.api.routes import Route
from xce.auth.runtime import AuthRuntime
from xce.core.errors import NotFound, XceError
from xce.protocol.auth import Join, JoinToken
from xce.setup.jointokens import DEFAULT_TTL_S, PREFIX, JoinTokenStore


def ca_sha256(pem: str) -> str:
    """The hash printed with join tokens: SHA-256 of the CA certificate's DER bytes."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def _ca_pem(request: web.Request) -> str:
    ca_file = request.app[CONFIG].tls.ca_file
    if ca_file is None:
        raise NotFound("this controller has no tls.ca_file: there is no cluster CA to join")
    return Path(ca_file).read_text()


def _store(request: web.Request) -> JoinTokenStore:
    return JoinTokenStore(request.app[SETTINGS].state_dir)


def _issue_client_cert(ca_file: Path | None, name: str, hosts: list[str]) -> tuple[str, str] | None:
    """A client certificate for `name` from the CA beside ca_file, or None without its key."""
    from xce.auth.pki import CA_KEY, CertPair, issue_certificate

    if ca_file is None:
        return None
    ca = CertPair(ca_file, ca_file.with_name(CA_KEY))
    if not ca.key_path.is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        pair = issue_certificate(ca, Path(tmp), name, [name, *hosts], client=True)
        return pair.cert_path.read_text(), pair.key_path.read_text()


async def join_ca(request: web.Request) -> web.Response:
    pem = await asyncio.to_thread(_ca_pem, request)
    return json_response({"ca_pem": pem, "ca_sha256": ca_sha256(pem)})


async def join(request: web.Request) -> web.Response:
    body = await read_body(request, Join)
    config = request.app[CONFIG]
    auth: AuthRuntime = request.app[AUTH]
    name = body.name
    pem = await asyncio.to_thread(_ca_pem, request)  # before the token is spent
    # The token's id (never its secret) says in the audit log which join token was used.
    token_id = body.token.removeprefix(PREFIX).partition(".")[0][:32]
    try:
        role = await asyncio.to_thread(_store(request).redeem, body.token)
    except XceError as exc:
        await auth.audit.record(
            "-",
            "node.join",
            f"service:{name}",
            "denied",
            f"join token {token_id}: {exc.message}",
            request.remote or "",
        )
        raise
    service_token, _ = auth.tokens.issue(
        name, (), (role,), "service", host=name if role == "worker" else None
    )
    await auth.audit.record(
        "-",
        "node.join",
        f"service:{name}",
        "ok",
        f"role {role}, join token {token_id}",
        request.remote or "",
    )
    answer: dict[str, Any] = {
        "role": role,
        "name": name,
        "controllers": list(config.controllers),
        "ca_pem": pem,
        "service_token": service_token,
        # The controller's [worker] section is the cluster's template for new workers.
        "worker": {
            "allow_root_jobs": config.worker.allow_root_jobs,
            "heartbeat_interval_s": config.worker.heartbeat_interval_s,
        },
        # A standby that takes over must apply the same job-safety rules as this primary.
        "controller": controller_template(config.controller),
    }
    issued = await asyncio.to_thread(
        _issue_client_cert,
        config.tls.ca_file,
        body.name,
        list(body.hosts),
    )
    if issued is not None:
        answer["cert_pem"], answer["key_pem"] = issued
    return json_response(answer)


def controller_template(settings: Any) -> dict[str, Any]:
    """The `[controller]` keys a joining standby copies: the fence and who may run jobs."""
    return {
        "fence_timeout_s": settings.fence_timeout_s,
        "allow_root_jobs": settings.allow_root_jobs,
        "min_job_uid": settings.min_job_uid,
        "job_users": list(settings.job_users),
        "upload_quota_mb": settings.upload_quota_mb,
        "upload_ttl_s": settings.upload_ttl_s,
    }


async def create_join_token(request: web.Request) -> web.Response:
    body = await read_body(request, JoinToken)
    pem = await asyncio.to_thread(_ca_pem, request)
    issued = await asyncio.to_thread(
        _store(request).create,
        body.role,
        DEFAULT_TTL_S if body.ttl_s is None else body.ttl_s,
    )
    path = request.app[CONFIG].path
    return json_response(
        {
            "token": issued.token,
            "role": issued.role,
            "expires_at": issued.expires_at,
            "ca_sha256": ca_sha256(pem),
            # This controller's cluster directory: the printed join command names it, so a
            # new node gets the same layout (not a directory this cluster never used).
            "cluster_dir": str(path.parent) if path is not None else None,
        },
        status=201,
    )


ROUTES = [
    Route(
        "GET",
        "/api/v1/join/ca",
        join_ca,
        "The cluster CA certificate and its SHA-256",
        "public",
        "join",
    ),
    Route(
        "POST",
        "/api/v1/join",
        join,
        "Trade a one-time join token for the CA, the controllers and a node's settings",
        "public",
        "join",
        body=Join,
    ),
    Route(
        "POST",
        "/api/v1/join/tokens",
        create_join_token,
        "Create a one-time join token for a worker or standby",
        "cluster:admin",
        "join",
        body=JoinToken,
        ok_status=201,
    ),
]
