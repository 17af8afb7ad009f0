"""The read-only descriptors of a job's stdout and stderr (live tail, final upload)."""

from __future__ import annotations

import contextlib
import os
import stat

from xce.worker.attempt.running import RunningJob


def open_readers(job_dir: str) -> dict[str, int]:
    """Read descriptors of `.xce/stdout` and `.xce/stderr` (run as the user; no symlinks)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.open(job_dir, flags | os.O_DIRECTORY)
    try:
        meta = os.open(".xce", flags | os.O_DIRECTORY, dir_fd=top)
    finally:
        os.close(top)
    readers: dict[str, int] = {}
    try:
        for name in ("stdout", "stderr"):
            try:
                # O_NONBLOCK: a FIFO planted in place of the file cannot hang this thread.
                fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=meta)
            except OSError:
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                readers[name] = fd
            else:
                os.close(fd)
    finally:
        os.close(meta)
    return readers


def close_readers(job: RunningJob) -> None:
    """Close the output descriptors once nothing reads the job's output through them."""
    readers, job.readers = job.readers, {}
    for fd in readers.values():
        with contextlib.suppress(OSError):
            os.close(fd)
