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
from xce.auth.settings import AuthSettings
from xce.config import Config
from xce.controller.compose import compose
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
