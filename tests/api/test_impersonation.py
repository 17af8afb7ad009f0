"""Who may have a job run as another user: only holders of `user:impersonate` (admins by
default), whatever `allow_root_jobs` says; an operator's `job:control:all` is not enough."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from xce.config.auth import AuthSettings, parse_auth
from xce.core.rbac import DEFAULT_ROLES, RoleMap

from .conftest import Api, as_user, make_settings, start_api

JOBS = "/api/v1/jobs"
ALICE = as_user("alice", "user")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Api]:
    """allow_root_jobs = true (as `xce up` run as root writes it), and a site role that may
    impersonate without being an admin."""
    roles = {r: frozenset(p) for r, p in DEFAULT_ROLES.items()}
    roles["runner"] = frozenset({"job:submit", "job:view:self", "user:impersonate"})
    running, client = await start_api(
        make_settings(tmp_path, allow_root_jobs=True),
        tmp_path,
        auth_settings=AuthSettings(roles=RoleMap(roles=roles)),
    )
    try:
        yield running
    finally:
        await client.close()


@pytest.mark.parametrize("target", ["root", "alice"])
@pytest.mark.parametrize("role", ["operator", "group-admin", "user"])
async def test_no_role_without_the_action_may_run_jobs_as_another_user(
    cluster: Api, role: str, target: str
) -> None:
    body = await cluster.call(
        "POST", JOBS, 403, headers=as_user("dave", role), json={"command": "id", "user": target}
    )
    assert body["error"]["code"] == "forbidden", body
    message = body["error"]["message"]
    assert "user:impersonate" in message and target in message and "dave" in message, body
    assert cluster.service.state.jobs == {}  # nothing was queued


async def test_an_operator_still_submits_as_itself(cluster: Api) -> None:
    answer = await cluster.call(
        "POST", JOBS, 201, headers=as_user("dave", "operator"), json={"command": "id"}
    )
    assert cluster.service.state.job(answer["job_id"]).spec.user == "dave"
    same = {"command": "id", "user": "dave"}  # naming oneself is no impersonation
    await cluster.call("POST", JOBS, 201, headers=as_user("dave", "operator"), json=same)


@pytest.mark.parametrize("role", ["admin", "runner"])
@pytest.mark.parametrize("target", ["root", "alice"])
async def test_holders_of_the_action_may(cluster: Api, role: str, target: str) -> None:
    answer = await cluster.call(
        "POST", JOBS, 201, headers=as_user("erin", role), json={"command": "id", "user": target}
    )
    assert cluster.service.state.job(answer["job_id"]).spec.user == target


async def test_the_host_guard_still_applies_to_admins(tmp_path: Path) -> None:
    """`user:impersonate` is the caller's right; allow_root_jobs stays the cluster's guard."""
    api, client = await start_api(
        make_settings(tmp_path, allow_root_jobs=False), tmp_path, as_user("erin", "admin")
    )
    try:
        body = await api.call("POST", JOBS, 403, json={"command": "id", "user": "root"})
        assert "allow_root_jobs" in body["error"]["message"], body
    finally:
        await client.close()


def test_a_site_role_may_be_granted_the_action_in_the_config(tmp_path: Path) -> None:
    auth = parse_auth({"roles": {"runner": ["job:submit", "user:impersonate"]}}, tmp_path)
    assert "user:impersonate" in auth.roles.permissions(["runner"])
    assert "user:impersonate" in auth.roles.permissions(["admin"])
    assert "user:impersonate" not in auth.roles.permissions(["operator"])


async def test_another_users_upload_is_an_input_only_for_holders_of_the_action(
    cluster: Api,
) -> None:
    """Naming alice's upload as a job's input is reading her data: an operator (who may
    delete her uploads) may not, an admin may."""
    put = await cluster.client.post("/api/v1/uploads", data=b"alice's data", headers=ALICE)
    assert put.status == 201
    upload = (await put.json())["upload_id"]
    job = {"command": "cat in.txt", "inputs": {"in.txt": upload}}
    body = await cluster.call("POST", JOBS, 404, headers=as_user("dave", "operator"), json=job)
    assert "does not exist" in body["error"]["message"], body
    made = await cluster.call("POST", JOBS, 201, headers=as_user("erin", "admin"), json=job)
    assert cluster.service.state.job(made["job_id"]).spec.inputs
