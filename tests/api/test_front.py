"""The application's outer middleware (`front`): latency, high availability, request ids and
JSON errors folded into one frame must behave as the three separate layers did."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from xce.api.http import HA
from xce.auth.keys import key_dir
from xce.config.auth import AuthSettings
from xce.config.settings import Config
from xce.server.compose import compose
from xce.store.files import FileStore

from .conftest import KEYS, TOKENS, make_settings


@dataclass
class Epochs:
    epoch: int = 7


@dataclass
class FakeNode:
    """What the middleware reads of an HA node: role, epoch, claimed epochs, the lease."""

    role: str = "primary"
    epochs: Epochs = field(default_factory=Epochs)
    claimed: list[int] = field(default_factory=list)
    lease: None = None

    def claimed_epoch(self, epoch: int) -> None:
        self.claimed.append(epoch)

    def health(self) -> dict[str, str]:
        return {"status": "ok", "role": self.role}

    solo = False
    votes: list[dict[str, object]] = field(default_factory=list)

    def answer_vote(self, body: dict[str, object]) -> dict[str, object]:
        self.votes.append(body)
        return {"granted": True, "epoch": body["epoch"], "reason": ""}


@pytest.fixture
async def ha(tmp_path: Path) -> AsyncIterator[tuple[TestClient, FakeNode]]:
    settings = make_settings(tmp_path)
    shutil.copytree(KEYS, key_dir(settings.state_dir), ignore=shutil.ignore_patterns("users*"))
    files = FileStore(tmp_path / "files", 1 << 20, 1 << 20, 60.0, 1 << 20)
    app = compose(Config(controller=settings, auth=AuthSettings()), files).app
    node = FakeNode()
    app[HA] = node  # type: ignore[misc]  # a stand-in with what the middleware reads
    client = TestClient(TestServer(app), headers={"Authorization": f"Bearer {TOKENS['admin']}"})
    await client.start_server()
    try:
        yield client, node
    finally:
        await client.close()


async def test_primary_answers_name_role_epoch_and_request_id(
    ha: tuple[TestClient, FakeNode],
) -> None:
    client, node = ha
    resp = await client.get("/api/v1/jobs", headers={"X-XCE-Epoch": "9", "X-Request-Id": "r1"})
    assert resp.status == 200
    assert resp.headers["X-XCE-Role"] == "primary" and resp.headers["X-XCE-Epoch"] == "7"
    assert resp.headers["X-Request-Id"] == "r1"
    assert node.claimed == [9]


async def test_errors_carry_role_epoch_and_request_id(ha: tuple[TestClient, FakeNode]) -> None:
    client, _ = ha
    resp = await client.get("/api/v1/jobs/999999")
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "not_found"
    assert resp.headers["X-XCE-Role"] == "primary" and resp.headers["X-Request-Id"]
    resp = await client.get("/no/such/route")
    assert resp.status == 404 and resp.headers["X-XCE-Epoch"] == "7"


async def test_a_standby_refuses_all_but_public_routes(ha: tuple[TestClient, FakeNode]) -> None:
    client, node = ha
    node.role = "standby"
    resp = await client.get("/api/v1/jobs", headers={"X-XCE-Epoch": "x"})
    assert resp.status == 503
    assert resp.headers["X-XCE-Not-Primary"] == "1" and resp.headers["X-XCE-Role"] == "standby"
    assert (await resp.json())["error"]["code"] == "not_primary"
    assert node.claimed == []  # not digits: ignored
    resp = await client.get("/healthz")
    assert resp.status == 200 and resp.headers["X-XCE-Role"] == "standby"


async def test_a_vote_is_answered_whatever_the_role(ha: tuple[TestClient, FakeNode]) -> None:
    """A primary handing over may have stepped down (its probe saw the target's own vote)
    before the target's vote request reaches its API, which still listens while it shuts
    down: that request is answered, not refused with 503 (the target would lose the vote
    and claim a later epoch alone a failover timeout later)."""
    client, node = ha
    node.role = "standby"
    body = {"epoch": 8, "candidate": "http://b", "last_epoch": 7, "last_seq": 40}
    resp = await client.post("/api/v1/cluster/vote", json=body)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["granted"] is True and node.votes == [body]
    assert (await client.get("/api/v1/jobs")).status == 503  # the rest still refused
