"""Uploads cannot fill the controller's disk, and stay their owner's."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from xce.store.files import FileStore

from .conftest import Api, as_user, auth, make_settings, start_api

UPLOADS = "/api/v1/uploads"
ALICE, BOB, ADMIN = auth("user"), as_user("bob"), auth("admin")


async def _upload(api: Api, data: bytes, headers: dict[str, str], status: int = 201) -> dict:
    return await api.call("POST", UPLOADS, status, data=data, headers=headers)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_quota_counts_unused_uploads_per_user(secured: Api) -> None:
    files = secured.service.files
    files.quota_bytes = 1000
    first = await _upload(secured, b"a" * 600, ALICE)
    error = await _upload(secured, b"b" * 500, ALICE, 413)
    assert error["error"]["code"] == "too_large"
    message = error["error"]["message"]
    assert "alice holds 600 bytes" in message and "limit is 1000 bytes" in message
    assert "upload_quota_mb" in message
    # The refused upload left nothing behind, and other users have their own quota.
    assert sorted(p.name for p in (files.root / "uploads").iterdir()) == [
        first["upload_id"],
        first["upload_id"] + ".json",
    ]
    await _upload(secured, b"c" * 900, BOB)
    # A job that uses the upload keeps it on the quota (held, it never runs) ...
    job = await secured.call(
        "POST",
        "/api/v1/jobs",
        201,
        headers=ALICE,
        json={"command": "cat in", "inputs": {"in": first["upload_id"]}, "hold": True},
    )
    assert files.usage("alice") == 600
    await _upload(secured, b"b" * 500, ALICE, 413)
    # ... until the job is killed before it started: its inputs go with the kill.
    await secured.call("POST", f"/api/v1/jobs/{job['job_id']}/kill", 200, headers=ALICE)
    await secured.service.job_files.settled()
    assert files.usage("alice") == 0
    assert not (files.root / "jobs" / job["job_id"] / "inputs").exists()
    second = await _upload(secured, b"d" * 1000, ALICE)
    await _upload(secured, b"e", ALICE, 413)
    # Deleting one's own upload frees it too.
    gone = await secured.call("DELETE", f"{UPLOADS}/{second['upload_id']}", 200, headers=ALICE)
    assert gone == {"upload_id": second["upload_id"], "deleted": True, "size": 1000}
    await _upload(secured, b"f" * 1000, ALICE)


async def test_quota_in_megabytes_is_named_in_the_error(secured: Api) -> None:
    secured.service.files.quota_bytes = 1024 * 1024
    await _upload(secured, b"x" * 700_000, ALICE)
    error = await _upload(secured, b"y" * 700_000, ALICE, 413)
    assert "alice holds 0.7 MB" in error["error"]["message"]
    assert "limit is 1.0 MB" in error["error"]["message"]


async def test_uploads_belong_to_their_owner(secured: Api) -> None:
    mine = (await _upload(secured, b"alice's data", ALICE))["upload_id"]
    # Bob can neither use nor delete it: to him it does not exist.
    error = await secured.call(
        "POST", "/api/v1/jobs", 404, headers=BOB, json={"command": "cat in", "inputs": {"in": mine}}
    )
    assert mine in error["error"]["message"]
    await secured.call("DELETE", f"{UPLOADS}/{mine}", 404, headers=BOB)
    assert [
        u["upload_id"] for u in (await secured.call("GET", UPLOADS, 200, headers=BOB))["uploads"]
    ] == []
    listed = await secured.call("GET", UPLOADS, 200, headers=ALICE)
    assert [u["upload_id"] for u in listed["uploads"]] == [mine]
    assert listed["used_bytes"] == len(b"alice's data")
    assert listed["quota_bytes"] == 10240 * 1024 * 1024
    # An admin sees, uses and deletes anyone's.
    assert mine in [
        u["upload_id"] for u in (await secured.call("GET", UPLOADS, 200, headers=ADMIN))["uploads"]
    ]
    other = (await _upload(secured, b"more", ALICE))["upload_id"]
    await secured.call(
        "POST",
        "/api/v1/jobs",
        201,
        headers=ADMIN,
        json={"command": "cat in", "user": "alice", "inputs": {"in": other}},
    )
    await secured.call("DELETE", f"{UPLOADS}/{mine}", 200, headers=ADMIN)
    await secured.call("DELETE", f"{UPLOADS}/{mine}", 404, headers=ADMIN)
    error = await secured.call("DELETE", f"{UPLOADS}/not-an-id", 400, headers=ALICE)
    assert "not an upload id" in error["error"]["message"]


async def test_unused_uploads_expire(secured: Api) -> None:
    files = secured.service.files
    old = (await _upload(secured, b"old", ALICE))["upload_id"]
    created = files.uploads[old].created
    fresh_at = created + 100
    fresh = await files.save_upload(_chunks(b"new"), owner="alice", now=fresh_at)
    partial = files.root / "uploads" / ".0123.part"
    partial.write_bytes(b"torn")
    os.utime(partial, (created - 10, created - 10))
    assert files.sweep_uploads(now=created + files.ttl_s - 1) == []
    assert files.sweep_uploads(now=created + files.ttl_s + 1) == [old]
    assert not (files.root / "uploads" / old).exists()
    assert not (files.root / "uploads" / f"{old}.json").exists()
    assert not partial.exists()
    assert fresh[0] in files.uploads
    await secured.call(
        "POST",
        "/api/v1/jobs",
        404,
        headers=ALICE,
        json={"command": "cat in", "inputs": {"in": old}},
    )


async def test_a_restarted_controller_knows_owners_and_ages(secured: Api) -> None:
    files = secured.service.files
    mine = (await _upload(secured, b"data", ALICE))["upload_id"]
    legacy = "f" * 32  # an upload from before owners: only admins may use it
    (files.root / "uploads" / legacy).write_bytes(b"old")
    (files.root / "uploads" / ("e" * 32 + ".json")).write_text("{}")  # its file is gone
    again = FileStore(files.root, files.max_bytes, files.quota_bytes, files.ttl_s)
    assert again.uploads[mine].owner == "alice"
    assert again.uploads[mine].created == files.uploads[mine].created
    assert again.usage("alice") == 4
    assert again.uploads[legacy].owner is None
    assert not (files.root / "uploads" / ("e" * 32 + ".json")).exists()
    again.check_upload(legacy)  # anyone's: an admin
    try:
        again.check_upload(legacy, "alice")
        raise AssertionError("alice used an ownerless upload")
    except Exception as exc:
        assert "does not exist" in str(exc)


async def test_files_stay_private(secured: Api, tmp_path: Path) -> None:
    files = secured.service.files
    upload_id = (await _upload(secured, b"secret", ALICE))["upload_id"]
    for path in (files.root, files.root / "uploads", files.root / "jobs"):
        assert _mode(path) == 0o700, path
    for path in (files.root / "uploads" / upload_id, files.root / "uploads" / f"{upload_id}.json"):
        assert _mode(path) == 0o600, path
    job = await secured.call(
        "POST",
        "/api/v1/jobs",
        201,
        headers=ALICE,
        json={"command": "cat d/e/in", "inputs": {"d/e/in": upload_id}},
    )
    base = files.root / "jobs" / job["job_id"]
    for path in (base, base / "inputs", base / "inputs" / "d", base / "inputs" / "d" / "e"):
        assert _mode(path) == 0o700, path
    assert _mode(base / "inputs" / "d" / "e" / "in") == 0o600
    # Outputs a worker returns, in nested directories.
    stored = await files.save_output(
        int(job["job_id"]), job["job_id"], "o/p/q.txt", _chunks(b"out")
    )
    assert stored.size == 3
    out = base / "outputs" / job["job_id"]
    for path in (base / "outputs", out, out / "o", out / "o" / "p"):
        assert _mode(path) == 0o700, path
    assert _mode(out / "o" / "p" / "q.txt") == 0o600
    # A store made over directories an older version left 0755 tightens them.
    loose = tmp_path / "loose"
    for sub in ("uploads", "jobs"):
        (loose / sub).mkdir(parents=True)
    os.chmod(loose, 0o755)
    os.chmod(loose / "uploads", 0o755)
    FileStore(loose, 10)
    assert {_mode(loose), _mode(loose / "uploads"), _mode(loose / "jobs")} == {0o700}


async def _chunks(data: bytes):  # type: ignore[no-untyped-def]
    yield data


async def test_uploads_in_flight_share_the_quota(tmp_path: Path) -> None:
    """Two uploads at once cannot both pass a quota that fits only one."""
    import asyncio

    from xce.core.errors import TooLarge

    files = FileStore(tmp_path / "f", 10_000, quota_bytes=1000)
    gate = asyncio.Event()

    async def slow():  # type: ignore[no-untyped-def]
        yield b"x" * 400
        await gate.wait()
        yield b"x" * 400

    tasks = [asyncio.create_task(files.save_upload(slow(), owner="alice")) for _ in range(2)]
    await asyncio.sleep(0.05)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["StoredUpload", "TooLarge"]
    assert any(isinstance(r, TooLarge) for r in results)
    assert files.usage("alice") == 800 and files._inflight == {}
    assert len(list((tmp_path / "f" / "uploads").iterdir())) == 2  # one file + its .json


async def test_a_jobs_outputs_stop_at_the_per_job_limit(tmp_path: Path) -> None:
    """A job's outputs (stdout and stderr included) are capped per attempt: a job of many
    large files cannot fill the controller's disk (a second hostile review)."""
    api, client = await start_api(
        make_settings(tmp_path, max_job_outputs_mb=1), tmp_path, as_user("admin", "admin")
    )
    try:
        joined = await api.register("w1")  # the worker learns the limits when it joins
        assert joined["output_limits"] == {"file_bytes": 10 * 2**20, "job_bytes": 2**20}
        job_id = await api.submit(command="true")
        await api.service.schedule_once()
        base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
        await api.call("PUT", f"{base}/stdout?attempt=0&first=1", 201, data=b"x" * 600_000)
        answer = await api.call("PUT", f"{base}/a.out?attempt=0", 413, data=b"x" * 600_000)
        assert "max_job_outputs_mb" in answer["error"]["message"]
        listed = await api.call("GET", f"/api/v1/jobs/{job_id}/files", 200)
        names = [f["path"] for f in listed["files"]]
        assert "a.out" not in names and "stdout" in names
        # the attempt's upload starting again (first=1) counts from zero
        await api.call("PUT", f"{base}/stdout?attempt=0&first=1", 201, data=b"x" * 600_000)
        await api.call("PUT", f"{base}/b.out?attempt=0", 201, data=b"y" * 300_000)
    finally:
        await client.close()
