"""`LightClient` keeps `XceClient`'s rules: candidates in order, 503 "not primary" moves on,
the newest epoch goes back, one Idempotency-Key per submit, JSON errors as `ApiError`.
Real HTTP servers on 127.0.0.1 (http.server in threads)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from xce.client.errors import ApiError
from xce.client.light import LightClient
from xce.client.transport import InsecureTransport


class Server:
    def __init__(self, primary: bool, epoch: int) -> None:
        self.primary, self.epoch = primary, epoch
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if not outer.primary:
                    self.send_response(503)
                    self.send_header("X-XCE-Not-Primary", "1")
                    data = b'{"error": {"code": "not_primary", "message": "standby"}}'
                elif self.path.startswith("/api/v1/jobs/missing"):
                    self.send_response(404)
                    data = b'{"error": {"code": "not_found", "message": "no job missing"}}'
                else:
                    self.send_response(200)
                    data = json.dumps({"ok": True, "path": self.path}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("X-XCE-Epoch", str(outer.epoch))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    standby, primary = Server(False, 7), Server(True, 7)
    yield standby, primary
    standby.close()
    primary.close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_moves_past_dead_and_standby_candidates_and_sends_the_epoch_back(
    servers: tuple[Server, Server],
) -> None:
    standby, primary = servers
    with LightClient([_dead_url(), standby.url, primary.url], "tok") as client:
        assert client.jobs(state="RUN", user=None)["path"] == "/api/v1/jobs?state=RUN"
        assert client.epoch == 7
        client.job("17[3]")
    first, second = primary.seen
    assert first["headers"]["Authorization"] == "Bearer tok"
    # The standby's 503 already named epoch 7: the primary hears it from the first request.
    assert "X-XCE-Epoch" not in standby.seen[0]["headers"]
    assert first["headers"]["X-XCE-Epoch"] == "7" == second["headers"]["X-XCE-Epoch"]
    assert second["path"] == "/api/v1/jobs/17%5B3%5D"
    assert len(standby.seen) == 1  # the second request went straight to the primary


def test_one_idempotency_key_per_submit_on_every_candidate(servers: tuple[Server, Server]) -> None:
    standby, primary = servers
    with LightClient([standby.url, primary.url]) as client:
        client.submit({"command": "true"})
        client.submit({"command": "true"})
    keys = [s["headers"]["Idempotency-Key"] for s in (standby.seen[0], primary.seen[0])]
    assert keys[0] == keys[1]
    assert primary.seen[1]["headers"]["Idempotency-Key"] != keys[0]
    assert json.loads(primary.seen[0]["body"]) == {"command": "true"}


def test_errors(servers: tuple[Server, Server]) -> None:
    _, primary = servers
    with LightClient([primary.url]) as client, pytest.raises(ApiError) as found:
        client.job("missing")
    assert (found.value.status, found.value.code, found.value.message) == (
        404,
        "not_found",
        "no job missing",
    )
    with LightClient([_dead_url()]) as client, pytest.raises(ApiError) as found:
        client.hosts()
    assert found.value.status == 0 and "no controller answered" in found.value.message
    with pytest.raises(InsecureTransport):
        LightClient(["http://10.1.2.3:6820"])


@pytest.mark.parametrize("light", [True, False])
async def test_no_primary_taking_it_names_why_each_answering_candidate_refused(
    servers: tuple[Server, Server], light: bool
) -> None:
    """A candidate that answered "not the primary" says why (a primary whose lease lapsed
    names the reason): the error carries it, not only the dead candidates' connection
    errors. Both clients, the light one and the async one."""
    from xce.client.http import XceClient

    standby, _ = servers
    dead = _dead_url()
    if light:
        with LightClient([dead, standby.url]) as client, pytest.raises(ApiError) as found:
            client.hosts()
    else:
        client_async = XceClient([dead, standby.url], retry_for=0)
        try:
            with pytest.raises(ApiError) as found:
                await client_async.request("GET", "/api/v1/hosts")
        finally:
            await client_async.close()
    message = found.value.message
    assert found.value.status == 0 and found.value.code == "unreachable"
    assert message.startswith("no controller takes this now")
    assert f"{standby.url}: standby" in message and "the others did not answer" in message
