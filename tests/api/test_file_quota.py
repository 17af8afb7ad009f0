"""Every byte a user's uploads and jobs hold on the controller counts on their quota, in any
job state, until it is deleted: with the job's record (retention) or, for the inputs of a
job killed before it started, with the kill. Admins see the figures per user."""

from __future__ import annotations

from pathlib import Path

from .conftest import Api, as_user, auth
from .test_file_limits import raw_request

UPLOADS = "/api/v1/uploads"
USAGE = "/api/v1/files/usage"
ALICE, BOB, ADMIN = auth("user"), as_user("bob"), auth("admin")


async def _held_job(api: Api, data: bytes, headers: dict[str, str] = ALICE) -> str:
    upload = await api.call("POST", UPLOADS, 201, data=data, headers=headers)
    body = {"command": "cat in", "inputs": {"in": upload["upload_id"]}, "hold": True}
    return str((await api.call("POST", "/api/v1/jobs", 201, headers=headers, json=body))["job_id"])


def _job_dir(api: Api, job_id: str) -> Path:
    return api.service.files.root / "jobs" / job_id


async def test_uploads_attached_to_held_jobs_stay_on_the_quota(secured: Api) -> None:
    files = secured.service.files
    files.quota_bytes = 1000
    first = await _held_job(secured, b"a" * 400)
    second = await _held_job(secured, b"b" * 400)
    assert files.usage("alice") == 800
    error = await secured.call("POST", UPLOADS, 413, data=b"c" * 400, headers=ALICE)
    assert error["error"]["code"] == "too_large"
    message = error["error"]["message"]
    assert message.startswith("upload: 400 bytes would take alice over the quota")
    assert "800 bytes in the files of their jobs" in message
    assert "limit is 1000 bytes" in message and "upload_quota_mb" in message
    # Refused from Content-Length alone: no byte of the body is ever sent.
    status, _, body = await raw_request(
        secured, "POST", UPLOADS, {**ALICE, "Content-Length": "300", "Expect": "100-continue"}
    )
    assert status == 413 and b"300 bytes would take alice over the quota" in body

    # Killing a held job deletes its inputs (nothing will read them): usage drops at once.
    await secured.call("POST", f"/api/v1/jobs/{first}/kill", 200, headers=ALICE)
    assert files.usage("alice") == 400
    await secured.service.job_files.settled()
    assert not (_job_dir(secured, first) / "inputs").exists()
    assert (_job_dir(secured, second) / "inputs" / "in").read_bytes() == b"b" * 400
    await secured.call("POST", UPLOADS, 201, data=b"c" * 400, headers=ALICE)

    # A job killed before it started cannot be requeued: it has no inputs any more.
    error = await secured.call("POST", f"/api/v1/jobs/{first}/requeue", 409, headers=ALICE)
    assert "input files were deleted" in error["error"]["message"]


async def test_outputs_count_on_the_owner_and_go_with_the_purge(api: Api) -> None:
    files = api.service.files
    upload = await api.call("POST", UPLOADS, 201, data=b"i" * 100, headers=ALICE)
    job_id = await api.submit(
        user="alice", command="cat in", inputs={"in": upload["upload_id"]}, outputs=["out"]
    )
    await api.register("w1")
    await api.service.schedule_once()
    assert (await api.show(job_id))["state"] == "RUN"
    base = f"/api/v1/workers/w1/jobs/{job_id}"
    await api.call("PUT", f"{base}/outputs/out?attempt=0&first=1", 201, data=b"o" * 300)
    assert files.usage("alice") == 400
    # The same output sent again replaces the first copy: counted once.
    await api.call("PUT", f"{base}/outputs/out?attempt=0", 201, data=b"o" * 250)
    assert files.usage("alice") == 350
    body = {"attempt": 0, "exit_code": 0, "outputs": ["out"]}
    await api.call("POST", f"{base}/finished", 200, json=body)
    assert (await api.show(job_id))["state"] == "DONE"
    assert files.usage("alice") == 350  # a finished job's files still hold the disk

    # An output that would take the owner over the quota is refused from its size.
    files.quota_bytes = 400
    later = await api.submit(user="alice", outputs=["big"])
    await api.service.schedule_once()
    path = f"/api/v1/workers/w1/jobs/{later}/outputs/big?attempt=0&first=1"
    error = await api.call("PUT", path, 413, data=b"x" * 100)
    assert "would take alice over the quota" in error["error"]["message"]

    # Retention purges the record, and its files go with it.
    assert await api.service.purge_finished(api.service.clock() + 1) == 1
    assert files.usage("alice") == 0
    await api.service.job_files.settled()
    assert not _job_dir(api, job_id).exists()
    assert not (files.root / "digests" / "jobs" / job_id).exists()


async def test_an_array_killed_before_any_task_started_loses_its_inputs(secured: Api) -> None:
    files = secured.service.files
    upload = await secured.call("POST", UPLOADS, 201, data=b"z" * 50, headers=ALICE)
    body = {"command": "cat in", "inputs": {"in": upload["upload_id"]}, "array": "1-4"}
    array = (await secured.call("POST", "/api/v1/jobs", 201, headers=ALICE, json=body))["job_id"]
    assert files.usage("alice") == 50
    await secured.call("POST", f"/api/v1/jobs/{array}/kill", 200, headers=ALICE)
    await secured.service.job_files.settled()
    assert files.usage("alice") == 0
    assert not (_job_dir(secured, array) / "inputs").exists()


async def test_admins_see_each_users_files_and_others_may_not(secured: Api) -> None:
    secured.service.files.quota_bytes = 2000
    await _held_job(secured, b"a" * 600)
    await secured.call("POST", UPLOADS, 201, data=b"b" * 100, headers=ALICE)
    await secured.call("POST", UPLOADS, 201, data=b"c" * 1000, headers=BOB)
    page = await secured.call("GET", USAGE, 200, headers=ADMIN)
    assert page == {
        "users": [
            {"user": "bob", "files": 1, "bytes": 1000, "quota_bytes": 2000, "used_pct": 50.0},
            {"user": "alice", "files": 2, "bytes": 700, "quota_bytes": 2000, "used_pct": 35.0},
        ],
        "quota_bytes": 2000,
    }
    one = await secured.call("GET", USAGE, 200, headers=ADMIN, params={"user": "alice"})
    assert [r["bytes"] for r in one["users"]] == [700]
    none = await secured.call("GET", USAGE, 200, headers=ADMIN, params={"user": "carol"})
    assert none["users"] == [
        {"user": "carol", "files": 0, "bytes": 0, "quota_bytes": 2000, "used_pct": 0.0}
    ]
    # Usage names every user: not for plain users nor operators.
    for headers in (ALICE, as_user("dave", "operator")):
        error = await secured.call("GET", USAGE, 403, headers=headers)
        assert "file:admin" in error["error"]["message"]
