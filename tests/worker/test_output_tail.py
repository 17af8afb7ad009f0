"""Worker side of the live tail: what a heartbeat carries, and reading through the job's
own output descriptors (a job cannot point the worker at another file)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from tests.worker.assignments import assignment
from tests.worker.local_host import LocalHost
from xce.worker.agent.tail import OutputPusher
from xce.worker.attempt import readers, staging
from xce.worker.attempt.running import RunningJob


def _job(tmp_path: Path, name: str = "1", attempt: int = 0) -> RunningJob:
    job_dir = tmp_path / f"job{name}"
    meta = job_dir / ".xce"
    meta.mkdir(parents=True)
    job = RunningJob(assignment(job_id=name, attempt=attempt), job_dir, job_dir)
    for stream in ("stdout", "stderr"):
        (meta / stream).write_bytes(b"")
        job.readers[stream] = os.open(meta / stream, os.O_RDONLY)
    return job


def _write(job: RunningJob, stream: str, data: bytes) -> None:
    with (job.job_dir / ".xce" / stream).open("ab") as f:
        f.write(data)


def test_only_new_bytes_are_collected_once_taken(tmp_path: Path) -> None:
    job = _job(tmp_path)
    pusher = OutputPusher()
    assert pusher.collect([job]) == []  # nothing grew: nothing to send
    _write(job, "stdout", b"one\n")
    _write(job, "stderr", b"warn\n")
    chunks = pusher.collect([job])
    assert [(c.stream, c.offset, c.data) for c in chunks] == [
        ("stdout", 0, b"one\n"),
        ("stderr", 0, b"warn\n"),
    ]
    report = pusher.report(chunks)
    assert report[("1", 0)]["stdout"] == {"offset": 0, "data": base64.b64encode(b"one\n").decode()}
    # Not taken (the heartbeat failed): the same bytes go again.
    assert [c.data for c in pusher.collect([job])] == [b"one\n", b"warn\n"]
    pusher.taken(chunks)
    assert pusher.collect([job]) == []
    _write(job, "stdout", b"two\n")
    assert [(c.offset, c.data) for c in pusher.collect([job])] == [(4, b"two\n")]
    readers.close_readers(job)
    assert job.readers == {} and pusher.collect([job]) == []


def test_a_fast_writer_is_sampled_and_the_budget_is_shared(tmp_path: Path) -> None:
    jobs = [_job(tmp_path, str(n)) for n in range(3)]
    pusher = OutputPusher(chunk_bytes=100, budget_bytes=250)
    for job in jobs:
        _write(job, "stdout", bytes(range(256)) * 4)  # 1024 bytes each
    first = pusher.collect(jobs)
    assert [(c.job.key[0], c.offset, len(c.data)) for c in first] == [
        ("0", 924, 100),
        ("1", 924, 100),
        ("2", 924, 50),
    ]  # the latest bytes; budget 250
    pusher.taken(first)
    second = pusher.collect(jobs)  # the next heartbeat starts with another job
    assert [(c.job.key[0], c.offset, len(c.data)) for c in second] == [("2", 974, 50)]


def test_output_truncated_by_the_job_carries_on_from_its_new_size(tmp_path: Path) -> None:
    job = _job(tmp_path)
    pusher = OutputPusher()
    _write(job, "stdout", b"0123456789")
    pusher.taken(pusher.collect([job]))
    os.truncate(job.job_dir / ".xce" / "stdout", 4)
    assert pusher.collect([job]) == []
    _write(job, "stdout", b"xy")
    assert [(c.offset, c.data) for c in pusher.collect([job])] == [(4, b"xy")]


def test_a_refused_heartbeat_shrinks_or_stops_the_output(tmp_path: Path) -> None:
    pusher = OutputPusher(chunk_bytes=64 * 1024, budget_bytes=16 * 1024)
    pusher.refused(413, "too large")
    assert (pusher.budget_bytes, pusher.chunk_bytes, pusher.enabled) == (8192, 8192, True)
    pusher.refused(413, "too large")
    assert pusher.budget_bytes == 4096 and pusher.enabled
    pusher.refused(413, "too large")  # below the floor: off
    assert not pusher.enabled
    older = OutputPusher()
    older.refused(400, "body.running[0].output is not a known field")
    assert not older.enabled
    job = _job(tmp_path)
    _write(job, "stdout", b"x")
    assert older.collect([job]) == []


class _Recorder:
    """Stands in for XceClient: keeps what an output return sends."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def send_file(self, method: str, path: str, fd: int, size: int, **kw: Any) -> None:
        from tests.worker.local_host import read_fd

        self.files[path.rsplit("/", 1)[-1]] = read_fd(fd, size)


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs as root need a root worker")
async def test_a_job_that_swaps_its_stdout_for_a_symlink_uploads_its_own_output(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not yours\n")
    host = LocalHost(tmp_path)
    try:
        job = await host.start(
            {"command": f'echo mine; ln -sf {secret} "$XCE_JOB_DIR/.xce/stdout"; echo more'}
        )
        result = await host.wait(job)
        assert result.exit_code == 0
        live = OutputPusher().collect([job])
        assert [c.data for c in live if c.stream == "stdout"] == [b"mine\nmore\n"]
        client = _Recorder()
        await staging.upload_outputs(client, "h1", job)  # type: ignore[arg-type]
        readers.close_readers(job)
        assert client.files["stdout"] == b"mine\nmore\n"
        assert (job.job_dir / ".xce" / "stdout").is_symlink()  # the swap did happen
    finally:
        host.close()
