"""The door: what a candidate answers on its API port while it does not serve the API.

From recovery on, through standby time and a promotion, until the primary's API takes the
port (`Node.release_port`), a candidate answers `GET /healthz` (role, epoch, log end, the
highest epoch seen) and `POST /api/v1/cluster/vote` (xce/ha/election.py); everything else is
503 not_primary naming the primary, so clients move on. The others therefore never see a
live candidate silent between roles, a silence they could take for a crash.

A candidate that has won its term still answers here while its controller starts (state
set up, job files counted, listeners opened): its role is already `primary` (elections need
it), but it does not serve yet, so `/healthz` says `"serving": false` with the reason
STARTING and every other route is a 503 saying so, never "the primary is" itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from xce.api.http import bearer_token, parse_json_text
from xce.auth.keys import key_dir
from xce.auth.pki import server_ssl_context
from xce.auth.tokens import TokenService
from xce.config.settings import Config
from xce.core.errors import Unauthorized, XceError
from xce.core.rbac import allows
from xce.listen.connections import GuardedRunner
from xce.listen.sites import GuardedSite

if TYPE_CHECKING:
    from xce.ha.node import Node

STARTING = "starting: this controller won the primary role and its API is not listening yet"


class VoterCheck:
    """The vote route authenticates like the replication link: a bearer token of this
    cluster granting cluster:replicate. A candidate that has no signing keys yet (it never
    joined) cannot check one; it votes only while its log is empty, where a vote cannot give
    away anything it holds."""

    def __init__(self, config: Config, state_dir: Path) -> None:
        self.config = config
        self.folder = key_dir(state_dir)
        self._tokens: tuple[int, TokenService] | None = None

    def __call__(self, token: str, log_empty: bool) -> None:
        index = self.folder / "keys.json"
        if not index.exists():  # never create keys here: the primary's arrive by replication
            if not log_empty:
                raise Unauthorized("this candidate has no signing keys to check the token")
            return
        stamp = index.stat().st_mtime_ns
        if self._tokens is None or self._tokens[0] != stamp:
            a = self.config.auth
            self._tokens = (
                stamp,
                TokenService.open(
                    self.folder, a.issuer, a.audience, a.token_ttl_s, a.service_token_ttl_s
                ),
            )
        if not token:
            raise Unauthorized("a vote request needs a bearer token (cluster:replicate)")
        claims = self._tokens[1].verify(token)
        if not allows(self.config.auth.roles.permissions(claims.roles), "cluster:replicate"):
            raise Unauthorized(f"{claims.user} may not vote (needs cluster:replicate)")


async def serve(node: Node) -> web.AppRunner:
    """Listen on the candidate's API port with the door's three routes."""

    async def health(request: web.Request) -> web.Response:
        answer = node.health()
        if node.role == "primary":  # won, not serving until the API takes the port
            answer.update(serving=False, reason=STARTING)
        return web.json_response(answer, headers=node.headers())

    async def elsewhere(request: web.Request) -> web.Response:
        if node.role == "primary":
            message = f"{STARTING}; try again in a moment"
        elif node.primary_url:
            message = f"this controller is a {node.role}; the primary is {node.primary_url}"
        else:
            message = f"this controller is a {node.role}"
        headers = {**node.headers(), "X-XCE-Not-Primary": "1"}
        return web.json_response(
            {"error": {"code": "not_primary", "message": message}, "primary": node.primary_url},
            status=503,
            headers=headers,
        )

    async def vote(request: web.Request) -> web.Response:
        try:
            node.voters(
                bearer_token(request.headers.get("Authorization", "")),
                node.log_position() == (0, 0),
            )
            answer = node.answer_vote(parse_json_text(await request.read()))
        except XceError as exc:
            return web.json_response(
                {"error": {"code": exc.code, "message": exc.message}},
                status=exc.http_status,
                headers=node.headers(),
            )
        except ValueError:
            return web.json_response(
                {"error": {"code": "invalid_request", "message": "the body is not JSON"}},
                status=400,
                headers=node.headers(),
            )
        return web.json_response(answer, headers=node.headers())

    from xce.ha.node import start_site

    app = web.Application()
    app.router.add_get("/healthz", health)
    app.router.add_post("/api/v1/cluster/vote", vote)
    app.router.add_route("*", "/{tail:.*}", elsewhere)
    runner = GuardedRunner(
        app, node.config.guard.connections, access_log=None, shutdown_timeout=0.5
    )
    await runner.setup()
    s = node.config.controller
    site = GuardedSite(
        runner, s.listen_host, s.listen_port, ssl_context=server_ssl_context(node.config.tls)
    )
    await start_site(site)
    return runner
