"""The audit log: submissions, job control, queue/host admin, logins and user admin, readable
by admins."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

from .conftest import PASSWORDS, Api, login, make_settings, start_api, tenant_auth

AUDIT = "/api/v1/audit"


async def test_actions_and_refusals_are_recorded(tenants: Api) -> None:
    alice, bob, root = [await login(tenants, u) for u in ("alice", "bob", "root")]
    await tenants.call(
        "POST", "/api/v1/auth/login", 401, json={"username": "alice", "password": "guess-guess"}
    )
    job = (
        await tenants.call("POST", "/api/v1/jobs", 201, json={"command": "true"}, headers=alice)
    )["job_id"]
    await tenants.call("POST", f"/api/v1/jobs/{job}/kill", 403, headers=bob)
    await tenants.call("POST", f"/api/v1/jobs/{job}/kill", 200, headers=alice)
    await tenants.call("POST", "/api/v1/queues/normal/close", 403, headers=alice)
    await tenants.call("POST", "/api/v1/queues", 201, headers=root, json={"name": "extra"})
    await tenants.call("POST", "/api/v1/queues/extra/deactivate", 200, headers=root)
    await tenants.call(
        "POST",
        "/api/v1/workers/register",
        200,
        headers=root,
        json={"host": "w1", "slots": 1, "memory_mb": 100},
    )
    await tenants.call("POST", "/api/v1/hosts/w1/drain", 200, headers=root, json={"reason": "disk"})
    await tenants.call("POST", "/api/v1/hosts/nope/close", 404, headers=root)
    await tenants.call(
        "POST",
        "/api/v1/users",
        201,
        headers=root,
        json={"user": "erin", "password": "erin-password"},
    )

    page = await tenants.call("GET", f"{AUDIT}?limit=1000", 200, headers=root)
    seen = [(r["user"], r["action"], r["object"], r["outcome"]) for r in page["records"]]
    assert seen == [
        ("alice", "auth.login", "user:alice", "ok"),
        ("bob", "auth.login", "user:bob", "ok"),
        ("root", "auth.login", "user:root", "ok"),
        ("alice", "auth.login", "user:alice", "denied"),
        ("alice", "job.submit", f"job:{job}", "ok"),
        ("bob", "job.kill", f"job:{job}", "denied"),
        ("alice", "job.kill", f"job:{job}", "ok"),
        ("alice", "queue.close", "queue:normal", "denied"),
        ("root", "queue.create", "queue:extra", "ok"),
        ("root", "queue.deactivate", "queue:extra", "ok"),
        ("root", "host.drain", "host:w1", "ok"),
        ("root", "host.close", "host:nope", "failed"),
        ("root", "user.add", "user:erin", "ok"),
    ]
    assert page["total"] == len(seen)
    denied = page["records"][5]
    assert denied["detail"] == f"bob may not control job {job} of user alice"
    assert all(r["remote"] == "127.0.0.1" and r["ts"] > 0 for r in page["records"])
    text = (tenants.service.settings.state_dir / "audit.log").read_text()
    assert "guess-guess" not in text and "erin-password" not in text
    for password in PASSWORDS.values():
        assert password not in text


async def test_audit_reading_filters_and_pages(tenants: Api) -> None:
    root = await login(tenants, "root")
    for name in ("q1", "q2", "q3"):
        await tenants.call("POST", "/api/v1/queues", 201, headers=root, json={"name": name})
    for name in ("q1", "q2", "q3"):
        await tenants.call("POST", f"/api/v1/queues/{name}/close", 200, headers=root)
    page = await tenants.call("GET", f"{AUDIT}?action=queue&offset=1&limit=2", 200, headers=root)
    assert page["total"] == 6 and [r["object"] for r in page["records"]] == ["queue:q2", "queue:q3"]
    page = await tenants.call(
        "GET", f"{AUDIT}?action=queue.close&object=queue:q3", 200, headers=root
    )
    assert [(r["action"], r["object"]) for r in page["records"]] == [("queue.close", "queue:q3")]
    assert (await tenants.call("GET", f"{AUDIT}?user=nobody", 200, headers=root))["total"] == 0
    await tenants.call("GET", f"{AUDIT}?limit=0", 400, headers=root)
    await tenants.call("GET", f"{AUDIT}?since=yesterday", 400, headers=root)
    for user in ("alice", "carol", "dave"):  # users, group admins and operators may not
        await tenants.call("GET", AUDIT, 403, headers=await login(tenants, user))


async def test_the_log_is_private_append_only_json_lines(tenants: Api) -> None:
    await login(tenants, "alice")
    path = tenants.service.settings.state_dir / "audit.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"torn": ')  # a crash mid-line
    await login(tenants, "bob")
    assert path.read_bytes().startswith(first)
    page = await tenants.call("GET", AUDIT, 200, headers=await login(tenants, "root"))
    assert [r["user"] for r in page["records"]] == ["alice", "bob", "root"]  # torn one skipped
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[0])["user"] == "alice"


async def test_submissions_are_recorded_with_who_they_run_as(tenants: Api) -> None:
    alice, dave, root = [await login(tenants, u) for u in ("alice", "dave", "root")]
    own = await tenants.call("POST", "/api/v1/jobs", 201, json={"command": "id"}, headers=alice)
    other = {"command": "id", "user": "alice"}
    await tenants.call("POST", "/api/v1/jobs", 403, json=other, headers=dave)  # an operator
    made = await tenants.call("POST", "/api/v1/jobs", 201, json=other, headers=root)
    await tenants.call("POST", "/api/v1/jobs", 400, json={"command": ""}, headers=alice)
    page = await tenants.call("GET", f"{AUDIT}?action=job.submit", 200, headers=root)
    seen = [(r["user"], r["object"], r["outcome"], r["detail"]) for r in page["records"]]
    assert seen[0] == ("alice", f"job:{own['job_id']}", "ok", "queue normal")
    assert seen[1][:3] == ("dave", "job:", "denied") and "user:impersonate" in seen[1][3]
    assert seen[2] == ("root", f"job:{made['job_id']}", "ok", "queue normal, runs as alice")
    assert seen[3][:3] == ("alice", "job:", "failed") and "empty" in seen[3][3], seen
    assert len(seen) == 4 and all(r["remote"] for r in page["records"])


async def test_concurrent_submissions_each_get_one_whole_record(tenants: Api) -> None:
    """Records that arrive together are written together (one append, one fdatasync):
    each request still gets its own whole line, none lost or interleaved."""
    alice = await login(tenants, "alice")
    answers = await asyncio.gather(
        *(
            tenants.call("POST", "/api/v1/jobs", 201, json={"command": "id"}, headers=alice)
            for _ in range(40)
        )
    )
    path = tenants.service.settings.state_dir / "audit.log"
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    submitted = sorted(r["object"] for r in records if r["action"] == "job.submit")
    assert submitted == sorted(f"job:{a['job_id']}" for a in answers)
    assert len(set(submitted)) == 40


async def test_under_interval_fsync_accepted_submissions_are_written_with_the_next_group(
    tmp_path: Path,
) -> None:
    """`wal_fsync = "interval"`: an accepted job's record is no more durable than the job
    (answered before it is written); a refusal is written before its answer and takes the
    waiting records with it, in order; reading the log sees every record."""
    settings = make_settings(tmp_path, wal_fsync="interval", wal_fsync_interval_s=30.0)
    running, client = await start_api(settings, tmp_path, auth_settings=tenant_auth(tmp_path))
    try:
        alice, dave, root = [await login(running, u) for u in ("alice", "dave", "root")]
        path = settings.state_dir / "audit.log"
        first = await running.call(
            "POST", "/api/v1/jobs", 201, json={"command": "id"}, headers=alice
        )
        assert b"job.submit" not in path.read_bytes()  # waits up to the 30 s interval
        await running.call(
            "POST", "/api/v1/jobs", 403, json={"command": "id", "user": "alice"}, headers=dave
        )
        lines = [json.loads(line) for line in path.read_bytes().splitlines()]
        assert [(r["user"], r["action"], r["outcome"]) for r in lines[-2:]] == [
            ("alice", "job.submit", "ok"),
            ("dave", "job.submit", "denied"),
        ]
        assert lines[-2]["object"] == f"job:{first['job_id']}"
        second = await running.call(
            "POST", "/api/v1/jobs", 201, json={"command": "id"}, headers=alice
        )
        page = await running.call("GET", f"{AUDIT}?action=job.submit", 200, headers=root)
        assert [r["object"] for r in page["records"]] == [
            f"job:{first['job_id']}",
            "job:",
            f"job:{second['job_id']}",
        ]
        assert path.read_bytes().count(b"job.submit") == 3  # the read wrote it first
    finally:
        await client.close()
