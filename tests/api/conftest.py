"""In-process fixtures for the HTTP API: the real app over aiohttp's test server."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from xce.api.app import build_app
from xce.config import Config, ControllerSettings, TokenEntry
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.store.files import FileStore

TOKENS = {"admin": "admin-secret-token", "user": "alice-secret-token",
          "worker": "worker-secret-token"}
TOKEN_NAMES = {"admin": "root", "user": "alice", "worker": "w1"}


@dataclass
class Api:
    """The running app plus the objects behind it, for tests that step the scheduler."""

    client: TestClient
    service: ControllerService
    gateway: WorkerGateway
    app: web.Application

    async def call(self, method: str, path: str, status: int | None = None,
                   **kwargs: Any) -> Any:
        """One request; checks `status` when given and returns the JSON body."""
        resp = await self.client.request(method, path, **kwargs)
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        if status is not None:
            assert resp.status == status, (method, path, resp.status, body)
        return body

    async def submit(self, **body: Any) -> str:
        if "script" not in body:
            body.setdefault("command", "echo hi")
        return (await self.call("POST", "/api/v1/jobs", 201, json=body))["job_id"]

    async def register(self, host: str = "w1", slots: int = 4, memory_mb: int = 8000,
                       **attrs: str) -> Any:
        body: dict[str, Any] = {"host": host, "slots": slots, "memory_mb": memory_mb}
        if attrs:
            body["attributes"] = attrs
        return await self.call("POST", "/api/v1/workers/register", 200, json=body)

    async def show(self, job_id: str) -> Any:
        return await self.call("GET", f"/api/v1/jobs/{job_id}", 200)


def make_settings(tmp_path: Path, **overrides: Any) -> ControllerSettings:
    queues = (QueueRecord("normal", priority=30), QueueRecord("short", priority=50))
    return ControllerSettings(state_dir=tmp_path / "state", queues=queues, **overrides)


async def start_api(settings: ControllerSettings, tmp_path: Path) -> tuple[Api, TestClient]:
    service = ControllerService(settings, FileStore(tmp_path / "files", 10 * 1024 * 1024))
    now = service.clock()
    await service.commit(
        ev.QueueCreated(now, q) for q in settings.queues if q.name not in service.state.queues
    )
    gateway = WorkerGateway(service)
    app = build_app(service, gateway, Config(controller=settings))
    client = TestClient(TestServer(app))
    await client.start_server()
    return Api(client, service, gateway, app), client


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """An open controller: no tokens, every caller is an admin (X-XCE-User names them)."""
    running, client = await start_api(make_settings(tmp_path, max_body_kb=64), tmp_path)
    try:
        yield running
    finally:
        await client.close()


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Api]:
    """A controller with static tokens for the roles admin, user and worker."""
    tokens = tuple(
        TokenEntry(TOKEN_NAMES[role], role, hashlib.sha256(tok.encode()).hexdigest())
        for role, tok in TOKENS.items()
    )
    running, client = await start_api(make_settings(tmp_path, tokens=tokens), tmp_path)
    try:
        yield running
    finally:
        await client.close()


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}
