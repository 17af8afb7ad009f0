"""Moving job files through the controller (there is no shared storage).

Before a job starts its inputs are fetched into its job directory; after it ends stdout,
stderr and the files matching its declared output patterns are returned. Every file is
created or opened *as the job's user* (xce/worker/attempt/userfs.py) by a walk that never follows a
symlink, from a descriptor of the job's directory: a job cannot make the worker read
`/etc/shadow` (its user cannot), nor write outside its tree, nor swap a directory for a link
between the check and the use (the upload reads descriptors opened before it starts).

Transfers stream (xce/client/transfer.py): an input is written chunk by chunk as it
arrives, by a thread that carries the user's credentials (so the user's disk quota applies,
as if the job had written it), resumed where a connection broke and checked against its
SHA-256 (a file that does not match is removed); an output is hashed, then streamed from
its descriptor. Memory stays a few MiB whatever the sizes. An output that cannot be
returned for good is named, with why, in the attempt's report (`output_problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import queue
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from urllib.parse import quote

from xce.client import ApiError, XceClient
from xce.client.http import Received, job_path
from xce.client.transfer import is_final
from xce.core.jobfiles import expand_file_pattern
from xce.store.files import safe_relative_path
from xce.store.room import amount
from xce.worker.attempt import fscreds, userfs
from xce.worker.attempt.inputcache import InputCache, copy_into
from xce.worker.attempt.running import RunningJob

log = logging.getLogger("xce.worker.staging")


def _base(host: str, job_id: str) -> str:
    return f"/api/v1/workers/{quote(host)}/jobs/{job_path(job_id)}"


class UserFileWriter:
    """The sink of one input's download: chunks written through the descriptor opened as
    the job's user, by one thread that carries the user's credentials (fscreds.as_user), so
    the kernel charges the user's quota and the worker's root capabilities play no part.
    Chunks pass through a queue of `DEPTH`: the download is never more than a few MiB
    ahead of the disk. A write error is kept and raised on the next `write` (the download
    then stops) or by `finish`."""

    DEPTH = 2

    def __init__(self, creds: fscreds.Credentials | None, fd: int) -> None:
        self.fd = fd
        # Chunks; b"" means "truncate and start again", None "no more".
        self._queue: queue.Queue[bytes | None] = queue.Queue(self.DEPTH)
        self.failure: OSError | None = None
        self.ended = False
        self._done: asyncio.Future[int] = asyncio.ensure_future(fscreds.as_user(creds, self._drain))

    def _drain(self) -> int:
        """The user's thread: write what comes until None; returns the bytes written."""
        offset = 0
        try:
            while (item := self._queue.get()) is not None:
                if self.failure is not None:
                    continue  # keep taking, so the loop's put never blocks on a dead writer
                try:
                    if item:
                        _write_at(self.fd, item, offset)
                        offset += len(item)
                    else:
                        os.ftruncate(self.fd, 0)
                        offset = 0
                except OSError as exc:
                    self.failure = exc
        finally:
            self.ended = True
        return offset

    def _put(self, item: bytes | None) -> None:
        """Blocking put (in a worker thread), given up if the writer thread is gone."""
        while not self.ended:
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.5)
                return

    async def _send(self, item: bytes | None) -> None:
        if self._done.done():
            await self._done  # the thread could not start (credentials): its error
            raise OSError(errno.EPIPE, "the input writer has stopped")
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            await asyncio.to_thread(self._put, item)

    async def write(self, data: bytes) -> None:
        if self.failure is not None:
            raise self.failure
        await self._send(data)

    async def restart(self) -> bool:
        await self._send(b"")
        return True

    async def finish(self) -> int:
        """Wait for the last chunk to be written; the bytes written, or the write error."""
        await self._send(None)
        written = await self._done
        if self.failure is not None:
            raise self.failure
        return written

    async def abort(self) -> None:
        """Stop the thread, whatever it was doing (the file is removed by the caller)."""
        if not self._done.done():
            with contextlib.suppress(Exception):
                await self._send(None)
        with contextlib.suppress(Exception):
            await self._done


async def fetch_inputs(
    client: XceClient, host: str, job: RunningJob, cache: InputCache | None = None
) -> None:
    """Fetch the job's inputs into its directory, each streamed, resumed and verified (see
    the module docstring). An input that cannot be had raises ApiError or OSError with one
    line naming it (the attempt then fails to start); what it left is removed.

    A task of an array, given the worker's `cache`, takes a copy of the input the host
    already holds (xce/worker/attempt/inputcache.py): the controller sends it once per
    host, and each task still gets a file of its own, written as its user."""
    a = job.assignment
    for rel in a.inputs:
        rel = safe_relative_path(rel, "input path")
        fd = await fscreds.as_user(
            job.creds, userfs.open_input_target, str(job.job_dir), rel, discard=os.close
        )
        kept = False
        url = f"{_base(host, a.job_id)}/inputs/{quote(rel)}"
        params = {"attempt": str(a.attempt)}
        writer: UserFileWriter | None = None
        try:
            if cache is not None and a.array_index is not None and cache.has_room():
                await _copy_shared(client, cache, job, rel, url, params, fd)
            else:
                writer = UserFileWriter(job.creds, fd)
                await client.download_to(url, writer, what=f"input {rel}", params=params)
                await writer.finish()
            kept = True
        except OSError as exc:
            raise OSError(exc.errno, f"input {rel}: {exc.strerror or exc}") from None
        finally:
            if not kept and writer is not None:
                await writer.abort()
            os.close(fd)
            if not kept:  # never left looking like the input: not partial, not damaged
                with contextlib.suppress(Exception):
                    await fscreds.as_user(job.creds, userfs.remove_file, str(job.job_dir), rel)


async def _copy_shared(
    client: XceClient,
    cache: InputCache,
    job: RunningJob,
    rel: str,
    url: str,
    params: dict[str, str],
    target: int,
) -> None:
    """The array's input `rel` from the host's cache into `target` (the task's own file,
    opened as its user): fetched into the cache by the first task, confirmed by the
    controller (304) for the others, then copied by a thread with the user's credentials."""

    async def fetch(fd: int, held: str | None) -> Received:
        writer = UserFileWriter(None, fd)  # the worker's own file, root's
        try:
            got = await client.download_to(
                url, writer, what=f"input {rel}", params=params, if_none_match=held
            )
            await writer.finish()
            return got
        except BaseException:
            await writer.abort()
            raise

    source = await cache.open_shared((job.assignment.number, rel), fetch)
    try:
        async with _copies("input"):  # a long copy must not hold every worker thread
            # The thread gets descriptors of its own, and closes them: it cannot be stopped,
            # and a kill closes `source` and `target` at once; their numbers are then the
            # next files the worker opens as root, which the copy must never reach.
            mine = (os.dup(source), os.dup(target))
            await fscreds.as_user(job.creds, _copy_owned, *mine)
    finally:
        os.close(source)


def _copy_owned(source: int, target: int) -> int:
    """`copy_into` on two descriptors the calling thread owns: closed here, when it ends."""
    try:
        return copy_into(source, target)
    finally:
        os.close(source)
        os.close(target)


async def collect_outputs(job: RunningJob) -> list[tuple[str, int]]:
    """(name, read descriptor) of every file to return: stdout, stderr, declared outputs.

    The caller owns (and closes) the descriptors. stdout and stderr are the descriptors
    opened when the job's files were made, whatever the paths hold now."""
    files, warnings = await _collect(job)
    log_problems(job.key[0], warnings)
    return files


async def _collect(job: RunningJob) -> tuple[list[tuple[str, int]], list[str]]:
    """`collect_outputs`, and the search's warnings (patterns refused, files that could
    not be opened: they go into the report's output_problems)."""
    files = [
        (name, os.dup(fd))
        for name, fd in sorted(job.readers.items(), key=lambda item: item[0] != "stdout")
    ]
    patterns = list(job.assignment.outputs)
    if not patterns:
        return files, []
    skip_meta = os.path.abspath(job.work_dir) == os.path.abspath(job.job_dir)
    opened, warnings = await fscreds.as_user(
        job.creds, userfs.open_outputs, str(job.work_dir), patterns, skip_meta
    )
    return files + opened, warnings


def log_problems(job_id: str, problems: list[str]) -> None:
    """One worker log line for a pass's output problems, however many: a job can leave
    thousands of files the worker must skip or refuse, and a line each would drown the log
    (and cost its disk). The job's own `output_problems` names each one (bounded)."""
    if not problems:
        return
    count = len(problems)
    more = f" (and {count - 1} more: xce job show {job_id})" if count > 1 else ""
    log.warning(
        "job %s: %d output problem%s: %s%s",
        job_id,
        count,
        "s" if count > 1 else "",
        problems[0][:300],
        more,
    )


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
    """Why `name` is not returned, or "". The limit per job is named first: a controller
    without a cap per file sends the job's limit as the file's too."""
    if limits.job_bytes is not None and sent + size > limits.job_bytes:
        return (
            f"output {name} ({amount(size)}) would take the job's outputs over the limit "
            f"of {amount(limits.job_bytes)} ([controller] max_job_outputs_mb): not returned"
        )
    if limits.file_bytes is not None and size > limits.file_bytes:
        return (
            f"output {name} is {amount(size)}, over the limit of {amount(limits.file_bytes)} "
            "per file ([controller] max_upload_mb): not returned"
        )
    return ""


@dataclass
class OutputReturn:
    """What one pass of `upload_outputs` did."""

    returned: list[str] = field(default_factory=list)  # names the controller took
    # "NAME: why" for each output that will not be returned (over a cap, refused by the
    # controller, unreadable...), and the search's warnings: the attempt's output_problems.
    problems: list[str] = field(default_factory=list)
    # Names not returned because the controller could not take them now (unreachable,
    # server errors, stalls, each after the client's own bounded retries): a later pass
    # tries them again; `error` says why.
    pending: list[str] = field(default_factory=list)
    error: str = ""
    # No controller answered at all: the pass proved nothing about the files (the report
    # cannot go either), so it does not count against the passes before giving up on them.
    unreachable: bool = False


async def upload_outputs(
    client: XceClient,
    host: str,
    job: RunningJob,
    limits: OutputLimits | None = None,
    done: Collection[str] = (),
) -> OutputReturn:
    """Return the attempt's stdout, stderr and outputs, each hashed then streamed from the
    descriptor opened before the pass began; `done`: names an earlier pass returned (not
    sent again, still counted against the per-job cap). Once the controller cannot take a
    file now, the rest wait for the next pass (`pending`); files refused for good are
    `problems`. Never raises for what one file or the job's tree does."""
    a = job.assignment
    limits = limits or OutputLimits()
    result = OutputReturn()
    sent = 0
    files, warnings = await _collect(job)
    result.problems.extend(warnings)
    try:
        for name, fd in files:
            size = os.fstat(fd).st_size
            if name in done:
                sent += size
                continue
            if result.pending:
                result.pending.append(name)
                continue
            refused = _over(name, size, sent, limits)
            if refused:
                result.problems.append(f"{name}: {refused}")
                continue
            params = {"attempt": str(a.attempt)}
            if not done and not result.returned:
                params["first"] = "1"  # the controller drops outputs of earlier attempts
            try:
                await client.send_file(
                    "PUT",
                    f"{_base(host, a.job_id)}/outputs/{quote(name)}",
                    fd,
                    size,
                    what=f"output {name}",
                    params=params,
                    unreachable_ends=True,  # the report loop tries again on its schedule
                )
            except ApiError as exc:
                if not is_final(exc):
                    result.pending.append(name)
                    result.error = exc.message
                    result.unreachable = exc.code == "unreachable"
                    continue
                # This file is refused (too large, a name clash...): the others still go.
                result.problems.append(f"{name}: refused by the controller: {exc.message}")
                continue
            except OSError as exc:
                result.problems.append(f"{name}: cannot be read: {exc.strerror or exc}")
                continue
            result.returned.append(name)
            sent += size
    finally:
        for _, fd in files:
            with contextlib.suppress(OSError):
                os.close(fd)
        log_problems(a.job_id, result.problems)
    return result


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


_COPIES: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Semaphore] = {}


def _copies(kind: str = "std") -> asyncio.Semaphore:
    """At most two copies of a kind at once per event loop (the worker has one): `std` for
    -o/-e copies, `input` for array inputs from the host's cache, so that one user's large
    inputs never hold up other jobs' -o/-e files."""
    return _COPIES.setdefault((asyncio.get_running_loop(), kind), asyncio.Semaphore(2))


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
