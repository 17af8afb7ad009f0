"""Files beside the replicated log (xce/ha/files.py): job inputs and outputs, the users file
and the audit log reach a real standby over a real TCP link, in one process.

The primary is the real `ReplicationSource` with a `ControllerService` and `FileStore` on
its own state directory, the standby the real `Follower` on another; nothing is mocked but
the token check (as in test_replication.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.ha.test_replication import SETUP, Primary, follow, follower, stop, until
from xce.auth.audit import AuditLog
from xce.controller.requests import SubmitRequest
from xce.core import events as ev
from xce.ha import files as hafiles
from xce.ha import protocol
from xce.ha.files import FileSpace, Receiver
from xce.ha.follower import Follower
from xce.store import digests
from xce.store.replicated_names import output_name, upload_names


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


def with_files(p: Primary, users: Path | None = None) -> Primary:
    """Wire the primary's files to its source as run_primary does (xce/server/main.py)."""
    p.source.space = FileSpace(p.dir, users)
    p.service.file_replica = p.source
    return p


def standby(root: Path, users: Path | None = None) -> Follower:
    f = follower(root)
    space = FileSpace(f.state_dir, users)
    f.space, f.receiver = space, Receiver(space)
    return f


async def upload(p: Primary, data: bytes) -> str:
    """Stage an upload and ship it as the upload route does (xce/api/jobs.py)."""
    upload_id = (await p.service.files.save_upload(chunks(data), owner="alice")).upload_id
    await p.service.files_replicated(
        p.service.ship_files([(name, "put") for name in upload_names(upload_id)])
    )
    return upload_id


async def submit_with_input(
    p: Primary, data: bytes, hold: bool = True, more: dict[str, str] | None = None
) -> str:
    return await p.service.submit(
        SubmitRequest.from_fields(
            user="alice",
            command="sort data.csv",
            inputs={"in/data.csv": await upload(p, data), **(more or {})},
            uploads_of="alice",
            hold=hold,
        )
    )


async def test_sync_submit_is_acknowledged_with_its_inputs_on_the_standby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hafiles, "CHUNK", 64 * 1024)  # the 600 kB input in ten pieces
    p = with_files(Primary(tmp_path, mode="sync"))
    await p.start()
    await p.commit(SETUP)
    early = await upload(p, b"staged before the standby connected")
    f = standby(tmp_path)
    link = await follow(f, p)
    try:
        await until(lambda: any(s.in_sync for s in p.source.sessions.values()))
        data = b"3\n1\n2\n" * 100_000  # 600 kB
        # An upload is on the standby when it is acknowledged (a submit after a failover
        # finds it), with its owner record.
        staged = await upload(p, data)
        uploads = f.state_dir / "files" / "uploads"
        assert (uploads / staged).read_bytes() == data
        assert b"alice" in (uploads / f"{staged}.json").read_bytes()
        assert not (uploads / early).exists()
        job = await p.service.submit(
            SubmitRequest.from_fields(
                user="alice",
                command="sort data.csv",
                inputs={"in/data.csv": staged, "early.txt": early},
                uploads_of="alice",
                hold=True,
            )
        )
        # Acknowledged: the standby already holds the inputs, byte for byte, and the job;
        # its copy of the upload became the input (moved, as on the primary).
        copy = f.state_dir / "files" / "jobs" / job / "inputs" / "in" / "data.csv"
        assert copy.read_bytes() == data
        assert (
            copy.parent.parent / "early.txt"
        ).read_bytes() == b"staged before the standby connected"
        assert sorted(uploads.iterdir()) == []
        assert f.state.job(job).spec.inputs == ("early.txt", "in/data.csv")
        assert (copy.stat().st_mode & 0o777) == 0o600
        assert not p.source.degraded

        # Outputs returned by a worker (as xce/api/workers.py stores them): waited for.
        assert p.service.ship_files([(f"files/jobs/{job}/outputs/{job}", "drop")])
        await p.service.files.save_output(int(job), job, "stdout", chunks(b"1\n2\n3\n"))
        await p.service.files_replicated(
            p.service.ship_files([(output_name(int(job), job, "stdout"), "put")])
        )
        assert (
            f.state_dir / "files" / "jobs" / job / "outputs" / job / "stdout"
        ).read_bytes() == b"1\n2\n3\n"

        # The standby recorded each file's SHA-256 from the link (the input's moved with
        # the upload): after a failover, downloads carry it without reading the file again.
        root = f.state_dir / "files"
        out = root / "jobs" / job / "outputs" / job / "stdout"
        assert digests.recorded(root, out, out.stat()) == hashlib.sha256(b"1\n2\n3\n").hexdigest()
        assert digests.recorded(root, copy, copy.stat()) == hashlib.sha256(data).hexdigest()
    finally:
        await stop(link)
        await f.close()
        await p.close()


async def test_a_new_standby_catches_up_the_files_its_records_name(tmp_path: Path) -> None:
    users = tmp_path / "primary-users.toml"
    users.write_text('[users.alice]\npassword = "hash"\n')
    p = with_files(Primary(tmp_path), users)
    await p.start()
    await p.commit(SETUP)
    job = await submit_with_input(p, b"input bytes", hold=False)
    # A finished job with outputs, stored before any standby existed.
    await p.service.files.save_output(int(job), job, "result/out.txt", chunks(b"the result"))
    await p.commit(
        [ev.JobStarted(4.0, job, "h1"), ev.JobFinished(5.0, job, 0, 0, outputs=("result/out.txt",))]
    )
    # The primary's audit log has lines; the new standby has a different one of its own.
    audit = AuditLog(p.dir / "audit.log")
    await audit.record("admin", "user.add", "user:alice", "ok")
    standby_users = tmp_path / "standby-users.toml"
    f = standby(tmp_path, standby_users)
    (f.state_dir / "audit.log").write_bytes(b'{"action": "only on the standby"}\n')
    link = await follow(f, p)
    try:
        base = f.state_dir / "files" / "jobs" / job
        await until(
            lambda: (
                (base / "outputs" / job / "result" / "out.txt").is_file()
                and (base / "inputs" / "in" / "data.csv").is_file()
                and standby_users.is_file()
            )
        )
        assert (base / "outputs" / job / "result" / "out.txt").read_bytes() == b"the result"
        assert (base / "inputs" / "in" / "data.csv").read_bytes() == b"input bytes"
        assert standby_users.read_bytes() == users.read_bytes()
        # The audit log: the primary's replaced the standby's, which is kept beside it.
        await until(
            lambda: (f.state_dir / "audit.log").read_bytes() == (p.dir / "audit.log").read_bytes()
        )
        aside = list(f.state_dir.glob("audit.log.diverged-*"))
        assert [a.read_bytes() for a in aside] == [b'{"action": "only on the standby"}\n']
        # Later lines are appended as they come, and a changed users file follows.
        audit.on_append = p.source.wake_files
        await audit.record("admin", "user.delete", "user:bob", "ok")
        await until(
            lambda: (f.state_dir / "audit.log").read_bytes() == (p.dir / "audit.log").read_bytes()
        )
        assert b"user:bob" in (f.state_dir / "audit.log").read_bytes()
        users.write_text('[users.carol]\npassword = "hash2"\n')
        p.source.ship([("users", "put")])
        await until(lambda: b"carol" in standby_users.read_bytes())
    finally:
        await stop(link)
        await f.close()
        await p.close()


async def test_a_reconnecting_standby_gets_only_the_new_audit_lines(tmp_path: Path) -> None:
    p = with_files(Primary(tmp_path))
    await p.start()
    audit = AuditLog(p.dir / "audit.log")
    audit.on_append = p.source.wake_files
    await audit.record("admin", "queue.close", "queue:normal", "ok")
    f = standby(tmp_path)
    link = await follow(f, p)
    try:
        await until(
            lambda: (
                (f.state_dir / "audit.log").is_file()
                and (f.state_dir / "audit.log").read_bytes() == (p.dir / "audit.log").read_bytes()
            )
        )
        await stop(link)
        await audit.record("admin", "queue.open", "queue:normal", "ok")
        link = await follow(f, p)
        await until(
            lambda: (f.state_dir / "audit.log").read_bytes() == (p.dir / "audit.log").read_bytes()
        )
        assert not list(f.state_dir.glob("audit.log.diverged-*"))  # appended, not replaced
    finally:
        await stop(link)
        await f.close()
        await p.close()


def test_the_receiver_refuses_names_outside_its_places_and_wrong_content(tmp_path: Path) -> None:
    r = Receiver(FileSpace(tmp_path))
    put = {
        "ticket": 1,
        "op": "put",
        "offset": 0,
        "last": True,
        "data": b"x",
        "sha256": hashlib.sha256(b"x").digest(),
    }
    for name in (
        "files/../../etc/passwd",
        "files/uploads/abc",
        "/etc/passwd",
        "other",
        "files/jobs/1/../../../x",
    ):
        try:
            r.apply({**put, "name": name})
        except protocol.XceError as exc:
            assert exc.http_status == 400
        else:
            raise AssertionError(f"{name} was accepted")
    try:
        r.apply({**put, "name": "files/jobs/1/inputs/a", "sha256": b"\0" * 32})
    except protocol.XceError as exc:
        assert "SHA-256" in exc.message
    else:
        raise AssertionError("wrong content was accepted")
    assert not (tmp_path / "files" / "jobs" / "1" / "inputs" / "a").exists()
    assert list((tmp_path / "files" / "jobs" / "1" / "inputs").iterdir()) == []
    assert r.apply({**put, "name": "files/jobs/1/inputs/a"})
    assert (tmp_path / "files" / "jobs" / "1" / "inputs" / "a").read_bytes() == b"x"


async def test_the_primary_takes_back_files_only_a_standby_holds(tmp_path: Path) -> None:
    """A job's output stored by the old primary and lost in the failover (never
    replicated): when that candidate follows again, the new primary asks it for the file."""
    p = with_files(Primary(tmp_path))
    await p.start()
    await p.commit(SETUP)
    job = await submit_with_input(p, b"in", hold=False)
    await p.commit(
        [
            ev.JobStarted(4.0, job, "h1"),
            ev.JobFinished(5.0, job, 0, 0, outputs=("stdout", "kept.txt")),
        ]
    )
    await p.service.files.save_output(int(job), job, "kept.txt", chunks(b"the primary's"))
    f = standby(tmp_path)
    outputs = f.state_dir / "files" / "jobs" / job / "outputs" / job
    outputs.mkdir(parents=True)
    (outputs / "stdout").write_bytes(b"only on the standby\n")
    (outputs / "kept.txt").write_bytes(b"the standby's")
    link = await follow(f, p)
    try:
        back = p.dir / "files" / "jobs" / job / "outputs" / job / "stdout"
        await until(back.is_file)
        assert back.read_bytes() == b"only on the standby\n"
        # The primary's own file is never replaced by a standby's.
        assert (
            p.dir / "files" / "jobs" / job / "outputs" / job / "kept.txt"
        ).read_bytes() == b"the primary's"
    finally:
        await stop(link)
        await f.close()
        await p.close()


async def test_a_standby_that_takes_no_files_still_follows_the_records(tmp_path: Path) -> None:
    """A standby of an older version says nothing of files in its hello: it gets records
    only, and a sync submit with inputs is not held up waiting for its file acks."""
    p = with_files(Primary(tmp_path, mode="sync"))
    await p.start()
    await p.commit(SETUP)
    f = follower(tmp_path)  # no FileSpace: its hello does not offer files
    link = await follow(f, p)
    try:
        await until(lambda: any(s.in_sync for s in p.source.sessions.values()))
        started = asyncio.get_running_loop().time()
        job = await submit_with_input(p, b"data")
        assert asyncio.get_running_loop().time() - started < p.source.sync_timeout_s
        assert not p.source.degraded
        await until(lambda: f.durable_seq == p.store.writer.durable_seq)
        assert f.state.job(job).spec.inputs == ("in/data.csv",)
        assert not (f.state_dir / "files").exists()
        assert not link.done()
    finally:
        await stop(link)
        await f.close()
        await p.close()
