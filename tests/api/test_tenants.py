"""Tenants: users see and control their own jobs, group admins their groups', operators all."""

from __future__ import annotations

from .conftest import Api, login

JOBS = "/api/v1/jobs"


async def _finish_with_output(api: Api, job_id: str, text: bytes) -> None:
    await api.register("w1")
    await api.service.schedule_once()
    await api.call(
        "PUT",
        f"/api/v1/workers/w1/jobs/{job_id}/outputs/stdout?attempt=0&first=1",
        201,
        data=text,
        headers=await login(api, "root"),
    )
    await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        200,
        json={"attempt": 0, "exit_code": 0},
        headers=await login(api, "root"),
    )


async def test_user_cannot_see_kill_or_download_another_users_job(tenants: Api) -> None:
    alice, bob = await login(tenants, "alice"), await login(tenants, "bob")
    root = await login(tenants, "root")
    tenants.client.session.headers.update(root)  # api.register / schedule as admin
    job = (await tenants.call("POST", JOBS, 201, json={"command": "echo secret"}, headers=alice))[
        "job_id"
    ]
    await _finish_with_output(tenants, job, b"alice's secret\n")
    assert (
        await tenants.call("GET", f"{JOBS}/{job}/files/stdout", 200, headers=alice)
        == b"alice's secret\n"
    )
    for method, path in (
        ("GET", f"{JOBS}/{job}"),
        ("GET", f"{JOBS}/{job}/files"),
        ("GET", f"{JOBS}/{job}/files/stdout"),
        ("POST", f"{JOBS}/{job}/kill"),
        ("POST", f"{JOBS}/{job}/requeue"),
        ("POST", f"{JOBS}/{job}/stop"),
    ):
        body = await tenants.call(method, path, 403, headers=bob)
        assert body["error"]["message"].startswith("bob may not"), path
        assert b"secret" not in str(body).encode()
    listing = await tenants.call("GET", JOBS, 200, headers=bob)
    assert listing["total"] == 0
    listing = await tenants.call("GET", f"{JOBS}?user=alice", 200, headers=bob)
    assert listing == {"jobs": [], "total": 0, "offset": 0, "limit": 1000}
    assert tenants.service.state.job(job).state.value == "DONE"  # requeue did not happen


async def test_arrays_are_scoped_too(tenants: Api) -> None:
    alice, bob = await login(tenants, "alice"), await login(tenants, "bob")
    array = (
        await tenants.call(
            "POST", JOBS, 201, json={"command": "true", "array": "1-5"}, headers=alice
        )
    )["job_id"]
    await tenants.call("GET", f"{JOBS}/{array}", 403, headers=bob)
    await tenants.call("GET", f"{JOBS}/{array}%5B2%5D", 403, headers=bob)
    await tenants.call("POST", f"{JOBS}/{array}/kill", 403, headers=bob)
    assert (await tenants.call("GET", JOBS, 200, headers=bob))["total"] == 0
    assert (await tenants.call("GET", JOBS, 200, headers=alice))["total"] == 1
    # `user=all` is every user the caller may see, never more
    assert (await tenants.call("GET", f"{JOBS}?user=all", 200, headers=bob))["total"] == 0
    assert (await tenants.call("GET", f"{JOBS}?user=all", 200, headers=alice))["total"] == 1
    await tenants.call("POST", f"{JOBS}/{array}/kill", 200, headers=alice)


async def test_group_admin_controls_only_its_group(tenants: Api) -> None:
    alice, bob, carol = [await login(tenants, u) for u in ("alice", "bob", "carol")]
    physics = (await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=alice))[
        "job_id"
    ]
    chemistry = (await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=bob))[
        "job_id"
    ]
    own = (await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=carol))["job_id"]
    listing = await tenants.call("GET", JOBS, 200, headers=carol)
    assert sorted(j["id"] for j in listing["jobs"]) == sorted([physics, own])
    await tenants.call("GET", f"{JOBS}/{physics}", 200, headers=carol)
    await tenants.call("POST", f"{JOBS}/{physics}/stop", 200, headers=carol)
    await tenants.call("POST", f"{JOBS}/{physics}/kill", 200, headers=carol)
    await tenants.call("GET", f"{JOBS}/{chemistry}", 403, headers=carol)
    body = await tenants.call("POST", f"{JOBS}/{chemistry}/kill", 403, headers=carol)
    assert body["error"]["message"] == f"carol may not control job {chemistry} of user bob"
    assert tenants.service.state.job(chemistry).state.value == "PEND"
    # A plain member of physics is not a group admin: alice cannot touch carol's job.
    await tenants.call("POST", f"{JOBS}/{own}/kill", 403, headers=alice)
    # Nor may a group admin submit as someone else.
    await tenants.call("POST", JOBS, 403, headers=carol, json={"command": "true", "user": "alice"})


async def test_operator_and_admin_see_and_control_all(tenants: Api) -> None:
    alice, bob = await login(tenants, "alice"), await login(tenants, "bob")
    a = await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=alice)
    b = await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=bob)
    for user in ("dave", "root"):
        headers = await login(tenants, user)
        assert (await tenants.call("GET", JOBS, 200, headers=headers))["total"] == 2
        await tenants.call("POST", f"{JOBS}/{a['job_id']}/stop", 200, headers=headers)
        await tenants.call("POST", f"{JOBS}/{b['job_id']}/stop", 200, headers=headers)
        await tenants.call("POST", f"{JOBS}/{a['job_id']}/resume", 200, headers=headers)
        await tenants.call("POST", f"{JOBS}/{b['job_id']}/resume", 200, headers=headers)
    dave = await login(tenants, "dave")
    await tenants.call("POST", "/api/v1/queues/normal/close", 200, headers=dave)
    await tenants.call("GET", "/api/v1/users", 403, headers=dave)  # not a user admin


async def test_dependency_only_on_jobs_one_may_view(tenants: Api) -> None:
    """A dependency reveals how its target ended: bob may not depend on alice's job, and
    the refusal reads as for a job that does not exist."""
    alice, bob, carol = [await login(tenants, u) for u in ("alice", "bob", "carol")]
    root = await login(tenants, "root")
    job = (await tenants.call("POST", JOBS, 201, json={"command": "true"}, headers=alice))["job_id"]
    array = (
        await tenants.call(
            "POST", JOBS, 201, json={"command": "true", "array": "1-3"}, headers=alice
        )
    )["job_id"]
    missing = str(int(array) + 100)
    before = (set(tenants.service.state.jobs), set(tenants.service.state.arrays))
    answers = []
    for dep in (
        f"afterok:{job}",
        f"afterany:{array}",
        f"afternotok:{array}[2]",
        f"afterok:{missing}",
    ):
        body = await tenants.call(
            "POST", JOBS, 404, headers=bob, json={"command": "true", "dependency": dep}
        )
        answers.append(body["error"]["message"].replace(dep.split(":")[1], "ID"))
    assert len(set(answers)) == 1, answers  # nothing tells alice's jobs from none
    assert (set(tenants.service.state.jobs), set(tenants.service.state.arrays)) == before
    # The owner, her group admin (carol leads physics) and an admin may.
    for who in (alice, carol, root):
        await tenants.call(
            "POST", JOBS, 201, headers=who, json={"command": "true", "dependency": f"afterok:{job}"}
        )
