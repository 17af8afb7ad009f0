"""The controller's side of containment: the fence rule, containment shown, who jobs may run as."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from xce.cli.hosts import readable_host
from xce.config.settings import ControllerSettings

from .conftest import Api, Clock, as_user, clocked_api, make_settings, start_api

T0 = 1_000_000.0
DEADLINE = 5.0 * 3  # heartbeat_interval_s * missed_heartbeats
FENCE = 30.0


def _settings(tmp_path: Path, **overrides: Any) -> ControllerSettings:
    return make_settings(
        tmp_path, heartbeat_interval_s=5.0, missed_heartbeats=3, fence_timeout_s=FENCE, **overrides
    )


async def _api(tmp_path: Path, **overrides: Any) -> tuple[Api, Any]:
    return await start_api(_settings(tmp_path, **overrides), tmp_path, as_user("root", "admin"))


@pytest.fixture
async def fenced(tmp_path: Path) -> AsyncIterator[tuple[Api, Clock]]:
    """A controller on a fake clock with a 15 s heartbeat deadline and a 30 s fence."""
    async with clocked_api(tmp_path, _settings(tmp_path)) as running:
        yield running


async def _running(api: Api, host: str = "w1", **body: Any) -> str:
    job_id = await api.submit(**body)
    await api.service.schedule_once()
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", host, 0)
    return job_id


async def _heartbeat(api: Api, host: str = "w1") -> None:
    await api.call("POST", f"/api/v1/workers/{host}/heartbeat", 200, json={})


async def test_register_and_assignments_tell_the_worker_the_fence(fenced) -> None:
    api, _ = fenced
    assert (await api.register("w1"))["fence_timeout_s"] == FENCE
    answer = await api.call("GET", "/api/v1/workers/w1/assignments", 200)
    assert answer["fence_timeout_s"] == FENCE


async def test_silent_host_keeps_its_jobs_until_the_fence_runs_out(fenced) -> None:
    api, clock = fenced
    await api.register("w1")
    job_id = await _running(api)

    clock.now = T0 + DEADLINE + 1
    assert await api.gateway.check_liveness() == [("w1", "unavailable")]
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["status"] == "unavailable"
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w1", 0)
    assert host["liveness"]["jobs_requeued_at"] == T0 + DEADLINE + FENCE
    assert host["liveness"]["jobs_requeued_in_s"] == FENCE - 1
    # Nor may anyone requeue it by hand before the worker has killed it.
    error = await api.call("POST", f"/api/v1/jobs/{job_id}/requeue", 409)
    assert "fence_timeout_s" in error["error"]["message"]

    clock.now = T0 + DEADLINE + FENCE - 0.5  # still inside the fence: nothing changes
    assert await api.gateway.check_liveness() == []
    assert (await api.show(job_id))["state"] == "RUN"

    clock.now = T0 + DEADLINE + FENCE + 0.5
    assert await api.gateway.check_liveness() == [("w1", "jobs lost")]
    job = await api.show(job_id)
    assert (job["state"], job["attempt"]) == ("PEND", 1)
    assert "unavailable" in job["reason"]
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["liveness"]["jobs_requeued_at"] is None  # nothing left to requeue


async def test_host_back_within_the_fence_carries_on(fenced) -> None:
    api, clock = fenced
    await api.register("w1")
    job_id = await _running(api)
    clock.now = T0 + DEADLINE + 1
    await api.gateway.check_liveness()
    assert (await api.call("GET", "/api/v1/hosts/w1", 200))["status"] == "unavailable"

    clock.now = T0 + DEADLINE + 20
    await _heartbeat(api)
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["status"] == "online"
    assert host["liveness"]["last_heartbeat_age_s"] == 0
    clock.now = T0 + DEADLINE + FENCE + 1  # past the first silence's fence: no matter now
    assert await api.gateway.check_liveness() == []
    job = await api.show(job_id)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w1", 0)
    # Its worker reports the same attempt's end as usual.
    await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        200,
        json={"attempt": 0, "exit_code": 0},
    )
    assert (await api.show(job_id))["state"] == "DONE"


async def test_a_reregistering_host_carries_on_too(fenced) -> None:
    api, clock = fenced
    await api.register("w1")
    job_id = await _running(api)
    clock.now = T0 + DEADLINE + 1
    await api.gateway.check_liveness()
    clock.now = T0 + DEADLINE + 10
    answer = await api.register("w1")
    assert [(j["job_id"], j["attempt"], j["action"]) for j in answer["jobs"]] == [
        (job_id, 0, "run")
    ]
    assert (await api.call("GET", "/api/v1/hosts/w1", 200))["status"] == "online"
    clock.now = T0 + DEADLINE + 20
    await _heartbeat(api)
    clock.now = T0 + DEADLINE + FENCE + 1  # the first silence's fence: no matter now
    assert await api.gateway.check_liveness() == []
    assert (await api.show(job_id))["state"] == "RUN"


async def test_fence_applies_queue_policy_and_kill_requests(fenced) -> None:
    api, clock = fenced
    await api.call(
        "POST",
        "/api/v1/queues",
        201,
        json={"name": "fragile", "priority": 90, "on_host_failure": "exit"},
    )
    await api.register("w1")
    requeued = await _running(api)
    ended = await _running(api, queue="fragile")
    killed = await _running(api)
    await api.call("POST", f"/api/v1/jobs/{killed}/kill", 200)
    clock.now = T0 + DEADLINE + 1
    await api.gateway.check_liveness()
    clock.now = T0 + DEADLINE + FENCE + 1
    await api.gateway.check_liveness()
    assert (await api.show(requeued))["state"] == "PEND"
    assert (await api.show(ended))["state"] == "EXIT"
    assert (await api.show(killed))["state"] == "EXIT"  # asked to die: never started again
    # The requeued job starts again elsewhere only now, with a new attempt.
    await api.register("w2")
    await api.service.schedule_once()
    job = await api.show(requeued)
    assert (job["state"], job["host"], job["attempt"]) == ("RUN", "w2", 1)


async def test_after_a_restart_an_unavailable_host_keeps_its_jobs_for_grace_and_fence(
    tmp_path: Path,
) -> None:
    from xce.controller.workers import RECONNECT_GRACE_S, WorkerGateway

    api, client = await _api(tmp_path)
    clock = Clock()
    api.service.clock = clock
    try:
        await api.register("w1")
        job_id = await _running(api)
        clock.now = T0 + DEADLINE + 1
        await api.gateway.check_liveness()
        restarted = T0 + 100
        clock.now = restarted  # a new controller (failover) over the same state
        gateway = WorkerGateway(api.service)
        clock.now = restarted + RECONNECT_GRACE_S + DEADLINE + FENCE - 1
        assert await gateway.check_liveness() == []
        assert (await api.show(job_id))["state"] == "RUN"
        clock.now = restarted + RECONNECT_GRACE_S + DEADLINE + FENCE + 1
        assert await gateway.check_liveness() == [("w1", "jobs lost")]
    finally:
        await client.close()


async def test_host_show_gives_the_timings(fenced) -> None:
    api, clock = fenced
    await api.register("w1")
    clock.now = T0 + 2
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["liveness"] == {
        "last_heartbeat_at": T0,
        "last_heartbeat_age_s": 2.0,
        "heartbeat_deadline_s": DEADLINE,
        "fence_timeout_s": FENCE,
        "unavailable_at": T0 + DEADLINE,
        "jobs_requeued_at": None,
        "jobs_requeued_in_s": None,
    }
    text = readable_host(host)["liveness"]
    assert text["last heartbeat"] == "2.0 s ago"
    assert text["heartbeat deadline"].startswith("15 s")
    assert text["fence timeout"].startswith("30 s")
    assert text["jobs requeued"] == "after 45 s of silence"


# --- containment ----------------------------------------------------------------------------

CONTAINMENT = {
    "kind": "v1",
    "memory": True,
    "cpu": True,
    "cpuset": True,
    "pids": True,
    "freezer": True,
    "cores": 2,
}


async def test_containment_is_kept_and_shown(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/workers/register",
        200,
        json={"host": "w1", "slots": 2, "memory_mb": 100, "containment": CONTAINMENT},
    )
    await api.register("old")  # a worker from before containment: says nothing
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["containment"] == CONTAINMENT
    assert host["containment_summary"] == "v1 (memory, cpu, cpuset, pids, freezer; cores=2)"
    assert readable_host(host)["containment"] == host["containment_summary"]
    beat = await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json={})
    assert beat["register_again"] is False
    api.gateway.containment.clear()  # as on a controller that started since
    beat = await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json={})
    assert beat["register_again"] is True
    await api.call(
        "POST",
        "/api/v1/workers/register",
        200,
        json={"host": "w1", "slots": 2, "memory_mb": 100, "containment": CONTAINMENT},
    )
    old = await api.call("GET", "/api/v1/hosts/old", 200)
    assert old["containment"] is None and old["containment_summary"] == "unknown"
    assert readable_host(old)["containment"] == "unknown"
    # The latest registration wins.
    await api.call(
        "POST",
        "/api/v1/workers/register",
        200,
        json={
            "host": "w1",
            "slots": 2,
            "memory_mb": 100,
            "containment": {"kind": "none", "rlimits": True},
        },
    )
    host = await api.call("GET", "/api/v1/hosts/w1", 200)
    assert host["containment_summary"] == "none (rlimits)"


@pytest.mark.parametrize(
    "containment, words",
    [
        ({f"k{i}": True for i in range(33)}, "more than 32 entries"),
        ({"x" * 65: True}, "longer than 64"),
        ({"kind": "v" * 257}, "longer than 256"),
        ({"kind": {"nested": 1}}, "must be string or number or boolean or null"),
        ({"cores": [1, 2]}, "must be string or number or boolean or null"),
        ({"": True}, "shorter than 1"),
        ("v2", "must be object"),
    ],
)
async def test_bad_containment_is_a_400(api: Api, containment: Any, words: str) -> None:
    error = await api.call(
        "POST",
        "/api/v1/workers/register",
        400,
        json={"host": "w1", "slots": 2, "memory_mb": 100, "containment": containment},
    )
    assert "containment" in error["error"]["message"]
    assert words in error["error"]["message"]
    assert "w1" not in api.service.state.hosts  # nothing registered


# --- who jobs may run as --------------------------------------------------------------------

# The controller host's accounts, as pwd.getpwnam sees them (the test machine's own
# /etc/passwd is shared with other tests that add and remove users).
ACCOUNTS = {"root": 0, "daemon": 1, "bin": 2, "cloud": 1000}


@pytest.fixture(autouse=True)
def accounts(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd
    from types import SimpleNamespace

    from xce.controller import submit_checks as service

    def getpwnam(name: str) -> Any:
        if name not in ACCOUNTS:
            raise KeyError(name)
        return SimpleNamespace(pw_name=name, pw_uid=ACCOUNTS[name])

    monkeypatch.setattr(service, "pwd", SimpleNamespace(getpwnam=getpwnam))
    monkeypatch.setattr(service, "UIDS", service.UidCache(service._uid_of))  # none remembered
    assert pwd.getpwnam is not getpwnam


@pytest.fixture
async def strict(tmp_path: Path) -> AsyncIterator[Api]:
    """Defaults: no root jobs, min_job_uid 1000, no job_users; an admin client."""
    api, client = await start_api(
        make_settings(tmp_path, allow_root_jobs=False), tmp_path, as_user("root", "admin")
    )
    try:
        yield api
    finally:
        await client.close()


async def test_root_jobs_are_refused_unless_allowed(strict: Api) -> None:
    error = await strict.call("POST", "/api/v1/jobs", 403, json={"command": "id"})
    assert error["error"] == {
        "code": "forbidden",
        "message": "jobs may not run as root: the cluster does not allow root jobs "
        "([controller] allow_root_jobs)",
    }
    assert strict.service.state.next_number == 1  # nothing was submitted


async def test_system_accounts_are_refused_whatever_the_role(strict: Api) -> None:
    for user in ("daemon", "bin"):
        error = await strict.call("POST", "/api/v1/jobs", 403, json={"command": "id", "user": user})
        message = error["error"]["message"]
        assert user in message and "min_job_uid = 1000" in message and "uid " in message
    # An account unknown on the controller host is left to the worker.
    await strict.call("POST", "/api/v1/jobs", 201, json={"command": "id", "user": "alice"})
    await strict.call("POST", "/api/v1/jobs", 201, json={"command": "id", "user": "cloud"})
    # Arrays are refused the same way.
    await strict.call(
        "POST", "/api/v1/jobs", 403, json={"command": "id", "user": "daemon", "array": "1-3"}
    )


async def test_job_users_let_listed_system_accounts_in_but_never_root(tmp_path: Path) -> None:
    api, client = await start_api(
        make_settings(tmp_path, allow_root_jobs=False, job_users=("daemon", "root")),
        tmp_path,
        as_user("root", "admin"),
    )
    try:
        await api.call("POST", "/api/v1/jobs", 201, json={"command": "id", "user": "daemon"})
        await api.call("POST", "/api/v1/jobs", 403, json={"command": "id", "user": "bin"})
        await api.call("POST", "/api/v1/jobs", 403, json={"command": "id", "user": "root"})
    finally:
        await client.close()


async def test_allowed_root_and_a_lower_min_uid(tmp_path: Path) -> None:
    api, client = await start_api(
        make_settings(tmp_path, allow_root_jobs=True, min_job_uid=0),
        tmp_path,
        as_user("root", "admin"),
    )
    try:
        await api.call("POST", "/api/v1/jobs", 201, json={"command": "id"})
        await api.call("POST", "/api/v1/jobs", 201, json={"command": "id", "user": "daemon"})
    finally:
        await client.close()


async def test_a_plain_user_still_cannot_submit_as_another(strict: Api) -> None:
    await strict.call(
        "POST", "/api/v1/jobs", 403, json={"command": "id", "user": "bob"}, headers=as_user("alice")
    )


async def test_a_job_killed_on_a_silent_host_is_requeued_only_after_the_fence(fenced) -> None:
    """Killed while its host is cut off, the job is EXIT at once; but it may still be
    running there, so starting it again waits for the fence."""
    api, clock = fenced
    await api.register("w1")
    job_id = await _running(api)
    clock.now = T0 + DEADLINE + 1
    await api.gateway.check_liveness()
    await api.call("POST", f"/api/v1/jobs/{job_id}/kill", 200)
    assert (await api.show(job_id))["state"] == "EXIT"
    await api.call("POST", f"/api/v1/jobs/{job_id}/requeue", 409)
    clock.now = T0 + DEADLINE + FENCE + 1
    await api.call("POST", f"/api/v1/jobs/{job_id}/requeue", 200)
    assert (await api.show(job_id))["state"] == "PEND"
