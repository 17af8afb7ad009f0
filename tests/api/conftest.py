"""In-process fixtures for the HTTP API: the real app over aiohttp's test server."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from xce.api.transfers import TRANSFERS
from xce.auth.backends.configfile import UsersFile
from xce.auth.keys import key_dir
from xce.auth.tokens import TokenService
from xce.config.auth import AuthSettings
from xce.config.settings import Config, ControllerSettings
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.rbac import RoleMap
from xce.server.compose import compose
from xce.store.files import FileStore

# One signing key folder for the whole run, so tokens can be minted at import time (test
# parameters use them); every app under test gets a copy of it in its state directory.
KEYS = Path(tempfile.mkdtemp(prefix="xce-test-keys-"))
atexit.register(shutil.rmtree, KEYS, True)
ISSUER = TokenService.open(KEYS, "xce", "xce-api", 3600.0, 86400.0)


def token_for(
    user: str, roles: tuple[str, ...] = ("user",), groups: tuple[str, ...] = (), kind: str = "user"
) -> str:
    """A valid token, as the controller under test would issue it."""
    return ISSUER.issue(user, groups, roles, kind)[0]


# The three roles the older tests use: root (admin), alice (user), w1 (worker service token).
TOKENS = {
    "admin": token_for("root", ("admin",)),
    "user": token_for("alice"),
    "worker": token_for("w1", ("worker",), kind="service"),
}


class Clock:
    """A controller clock the test moves by hand (`api.service.clock = Clock()`): deadlines
    and fences are crossed by setting `now`, never by sleeping."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def as_user(user: str, *roles: str, groups: tuple[str, ...] = ()) -> dict[str, str]:
    """Headers that make a request come from `user` (role user unless given)."""
    return {"Authorization": f"Bearer {token_for(user, roles or ('user',), groups)}"}


@dataclass
class Api:
    """The running app plus the objects behind it, for tests that step the scheduler."""

    client: TestClient
    service: ControllerService
    gateway: WorkerGateway
    app: web.Application

    async def call(self, method: str, path: str, status: int | None = None, **kwargs: Any) -> Any:
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

    async def register(
        self, host: str = "w1", slots: int = 4, memory_mb: int = 8000, **attrs: str
    ) -> Any:
        body: dict[str, Any] = {"host": host, "slots": slots, "memory_mb": memory_mb}
        if attrs:
            body["attributes"] = attrs
        return await self.call("POST", "/api/v1/workers/register", 200, json=body)

    async def show(self, job_id: str) -> Any:
        return await self.call("GET", f"/api/v1/jobs/{job_id}", 200)


def make_settings(tmp_path: Path, **overrides: Any) -> ControllerSettings:
    queues = (QueueRecord("normal", priority=30), QueueRecord("short", priority=50))
    # The admin token's user is root (TOKENS["admin"]), and many tests submit as it: this
    # test cluster allows root jobs, as `xce up` run as root does. Tests of the refusal
    # pass allow_root_jobs=False.
    overrides.setdefault("allow_root_jobs", True)
    return ControllerSettings(state_dir=tmp_path / "state", queues=queues, **overrides)


async def start_api(
    settings: ControllerSettings,
    tmp_path: Path,
    headers: dict[str, str] | None = None,
    auth_settings: AuthSettings | None = None,
) -> tuple[Api, TestClient]:
    if not key_dir(settings.state_dir).exists():
        shutil.copytree(
            KEYS, key_dir(settings.state_dir), ignore=shutil.ignore_patterns("users.toml*")
        )
    config = Config(controller=settings, auth=auth_settings or AuthSettings())
    files = FileStore(
        tmp_path / "files",
        10 * 1024 * 1024,
        settings.upload_quota_mb * 1024 * 1024,
        settings.upload_ttl_s,
        settings.max_job_outputs_mb * 1024 * 1024,
    )
    controller = compose(config, files)  # as run_primary does, without a WAL or HA node
    service, gateway, app = controller.service, controller.gateway, controller.app
    now = service.clock()
    await service.commit(
        ev.QueueCreated(now, q) for q in settings.queues if q.name not in service.state.queues
    )
    client = TestClient(TestServer(app), headers=headers or {})
    await client.start_server()
    return Api(client, service, gateway, app), client


@contextlib.asynccontextmanager
async def clocked_api(
    tmp_path: Path, settings: ControllerSettings
) -> AsyncIterator[tuple[Api, Clock]]:
    """An admin's controller on a `Clock` the test moves: deadlines, fences and relays are
    crossed by setting the time, never by sleeping."""
    api, client = await start_api(settings, tmp_path, as_user("root", "admin"))
    clock = Clock()
    api.service.clock = clock
    try:
        yield api, clock
    finally:
        await client.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """A controller whose client sends an admin token unless a test passes another one."""
    running, client = await start_api(
        make_settings(tmp_path, max_body_kb=64), tmp_path, as_user("admin", "admin")
    )
    try:
        yield running
    finally:
        await client.close()


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Api]:
    """A controller whose client sends no token: tests pick one per request (`auth(role)`)."""
    running, client = await start_api(make_settings(tmp_path), tmp_path)
    try:
        yield running
    finally:
        await client.close()


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


# Tenants: physics (alice; carol leads it) and chemistry (bob); dave is an operator.
PASSWORDS = {
    "alice": "alice-password",
    "bob": "bob-password",
    "carol": "carol-password",
    "dave": "dave-password",
    "root": "root-password",
}
MEMBERS = {
    "alice": (("physics",), ()),
    "bob": (("chemistry",), ()),
    "carol": (("physics", "physics-leads"), ()),
    "dave": ((), ("operator",)),
    "root": ((), ("admin",)),
}


_USERS_TEXT: list[bytes] = []  # hashing is slow on purpose: build the file once per run


def tenant_auth(tmp_path: Path) -> AuthSettings:
    """A users file with the tenants above and the group -> role mapping."""
    if not _USERS_TEXT:
        users = UsersFile(KEYS / "users.toml")  # removed with KEYS at exit
        for name, (groups, roles) in MEMBERS.items():
            users.add(name, PASSWORDS[name], groups, roles)
        _USERS_TEXT.append(users.path.read_bytes())
    (tmp_path / "users.toml").write_bytes(_USERS_TEXT[0])
    roles = RoleMap(groups={"physics-leads": ("group-admin",)})
    return AuthSettings(
        roles=roles, backends=({"type": "configfile", "path": "users.toml"},), base=tmp_path
    )


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[Api]:
    """A controller with a configfile backend; log in with `login(api, name)`."""
    running, client = await start_api(
        make_settings(tmp_path), tmp_path, auth_settings=tenant_auth(tmp_path)
    )
    try:
        yield running
    finally:
        await client.close()


async def login(api: Api, user: str) -> dict[str, str]:
    """Log in through the API with the user's password; returns the auth header."""
    body = await api.call(
        "POST", "/api/v1/auth/login", 200, json={"username": user, "password": PASSWORDS[user]}
    )
    return {"Authorization": f"Bearer {body['token']}"}


async def hold_the_transfer_slot(
    api: Api, client: TestClient
) -> tuple[asyncio.Task[Any], asyncio.Event]:
    """An upload that sends its first bytes and then waits for the returned event: it holds
    a transfer slot (the tests' store has one) until that is set. Returns the request's task
    and the event."""
    release = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"first part"
        await release.wait()
        yield b", last part"

    holder = asyncio.create_task(client.post("/api/v1/uploads", data=slow()))
    gate = api.app[TRANSFERS]
    for _ in range(1000):  # until the upload holds the one slot
        if gate.in_use == 1:
            break
        await asyncio.sleep(0.01)
    assert gate.in_use == 1
    return holder, release
