"""Moving job files through the controller (there is no shared storage).

Before a job starts its inputs are fetched into its job directory; after it ends stdout,
stderr and the files matching its declared output patterns are returned. Every file is
created or opened *as the job's user* (xce/worker/attempt/userfs.py) by a walk that never follows a
symlink, from a descriptor of the job's directory: a job cannot make the worker read
`/etc/shadow` (its user cannot), nor write outside its tree, nor swap a directory for a link
between the check and the use (the upload reads descriptors opened before it starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote

from xce.client import ApiError, XceClient
from xce.client.http import job_path
from xce.core.jobfiles import expand_file_pattern
from xce.store.files import safe_relative_path
from xce.worker.attempt import fscreds, userfs
from xce.worker.attempt.running import RunningJob

log = logging.getLogger("xce.worker.staging")


def _base(host: str, job_id: str) -> str:
    return f"/api/v1/workers/{quote(host)}/jobs/{job_path(job_id)}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def fetch_inputs(client: XceClient, host: str, job: RunningJob) -> None:
    a = job.assignment
    for rel in a.inputs:
        rel = safe_relative_path(rel, "input path")
        data = await client.request(
            "GET",
            f"{_base(host, a.job_id)}/inputs/{quote(rel)}",
            params={"attempt": str(a.attempt)},
        )
        fd = await fscreds.as_user(job.creds, userfs.open_input_target, str(job.job_dir), rel)
        try:
            await asyncio.to_thread(_write_all, fd, data)
        finally:
            os.close(fd)


async def collect_outputs(job: RunningJob) -> list[tuple[str, int]]:
    """(name, read descriptor) of every file to return: stdout, stderr, declared outputs.

    The caller owns (and closes) the descriptors. stdout and stderr are the descriptors
    opened when the job's files were made, whatever the paths hold now."""
    files = [
        (name, os.dup(fd))
        for name, fd in sorted(job.readers.items(), key=lambda item: item[0] != "stdout")
    ]
    patterns = list(job.assignment.outputs)
    if not patterns:
        return files
    skip_meta = os.path.abspath(job.work_dir) == os.path.abspath(job.job_dir)
    opened, warnings = await fscreds.as_user(
        job.creds, userfs.open_outputs, str(job.work_dir), patterns, skip_meta
    )
    for warning in warnings:
        log.warning("job %s: %s", job.key[0], warning)
    return files + opened


async def _chunks(fd: int, limit: int | None = None) -> AsyncIterator[bytes]:
    """The file behind `fd` from its start, at most `limit` bytes (pread: the live tail
    shares the stdout and stderr descriptors)."""
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        if limit is not None and offset + len(chunk) > limit:
            chunk = chunk[: limit - offset]
        offset += len(chunk)
        if chunk:
            yield chunk
        if limit is not None and offset >= limit:
            return


@dataclass(frozen=True)
class OutputLimits:
    """What the controller stores per file and per job attempt (it says so when the worker
    registers); a job's sparse file of terabytes costs a few blocks on the worker and would
    otherwise be read, sent and written out in full."""

    file_bytes: int | None = None
    job_bytes: int | None = None

    @classmethod
    def of(cls, answer: object) -> OutputLimits | None:
        limits = answer.get("output_limits") if isinstance(answer, dict) else None
        if not isinstance(limits, dict):
            return None
        values = [limits.get(k) for k in ("file_bytes", "job_bytes")]
        if not all(isinstance(v, int) and v > 0 for v in values):
            return None
        return cls(*values)


def _over(name: str, size: int, sent: int, limits: OutputLimits) -> str:
    """Why `name` is not returned, or ""."""
    if limits.file_bytes is not None and size > limits.file_bytes:
        return (
            f"output {name} is {size} bytes, over the limit of {limits.file_bytes} per "
            "file ([controller] max_upload_mb): not returned"
        )
    if limits.job_bytes is not None and sent + size > limits.job_bytes:
        return (
            f"output {name} ({size} bytes) would take the job's outputs over the limit "
            f"of {limits.job_bytes} ([controller] max_job_outputs_mb): not returned"
        )
    return ""


async def upload_outputs(
    client: XceClient, host: str, job: RunningJob, limits: OutputLimits | None = None
) -> list[str]:
    a = job.assignment
    limits = limits or OutputLimits()
    names = []
    sent = 0
    files = await collect_outputs(job)
    try:
        for i, (name, fd) in enumerate(files):
            size = os.fstat(fd).st_size
            refused = _over(name, size, sent, limits)
            if refused:
                log.warning("job %s: %s", a.job_id, refused)
                continue
            params = {"attempt": str(a.attempt)}
            if i == 0:
                params["first"] = "1"
            try:
                await client.request(
                    "PUT",
                    f"{_base(host, a.job_id)}/outputs/{quote(name)}",
                    params=params,
                    data=_chunks(fd, limits.file_bytes),
                    headers={"Content-Type": "application/octet-stream"},
                )
            except ApiError as exc:
                if not 400 <= exc.status < 500 or exc.status in (404, 408, 429):
                    raise
                # This file is refused (a name clash, too large): the others still go back.
                log.warning("job %s: output %s refused: %s", a.job_id, name, exc.message)
                continue
            names.append(name)
            sent += size
    finally:
        for _, fd in files:
            with contextlib.suppress(OSError):
                os.close(fd)
    return names


def _open_std_target(path: str) -> int:
    """Create or truncate `path` for writing (run as the job's user): not through a final
    symlink, and only a regular file (O_NONBLOCK so a FIFO planted there cannot hang us)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copy(source: int, target: int) -> None:
    """Copy the data of `source` to `target`, holes as holes (SEEK_DATA/SEEK_HOLE): a job's
    15 TB sparse stdout must not cost the worker hours of reading zeros."""
    size = os.fstat(source).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from here on
                break
            raise
        end = os.lseek(source, start, os.SEEK_HOLE)
        while start < end:
            chunk = os.pread(source, min(1 << 16, end - start), start)
            if not chunk:
                break
            _write_at(target, chunk, start)
            start += len(chunk)
        offset = end
    os.ftruncate(target, size)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


_COPIES: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


def _copies() -> asyncio.Semaphore:
    """At most two -o/-e copies at once per event loop (the worker has one)."""
    return _COPIES.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(2))


async def copy_std_files(job: RunningJob) -> None:
    """bsub/sbatch `-o`/`-e`: when the job ends its stdout and stderr are copied to the named
    files (relative to its working directory, `%J`/`%I`... expanded), written as its user,
    as LSF does without a shared spool. The job's own `.xce/stdout` and `.xce/stderr` stay,
    and still go back to the controller for `xce job output`. A file that cannot be written
    is logged, never fatal to the job's report."""
    a = job.assignment
    for stream, pattern in (("stdout", a.stdout_file), ("stderr", a.stderr_file)):
        source = job.readers.get(stream)
        if not pattern or source is None:
            continue
        name = expand_file_pattern(pattern, a.number, a.array_index, a.name)
        path = os.path.join(str(job.work_dir), name)
        try:
            target = await fscreds.as_user(job.creds, _open_std_target, path, discard=os.close)
            try:
                async with _copies():  # a long copy must not hold every worker thread
                    await asyncio.to_thread(_copy, source, target)
            finally:
                os.close(target)
        except OSError as exc:
            log.warning("job %s: cannot write its %s file %s: %s", a.job_id, stream, path, exc)
