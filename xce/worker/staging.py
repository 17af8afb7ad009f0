"""Moving job files through the controller (there is no shared storage).

Before a job starts its inputs are fetched into the job directory; after it ends stdout,
stderr and the files matching its declared output patterns are returned. Output patterns are
matched inside the working directory only; symlinks and anything resolving outside it are
skipped, so a job cannot make the worker upload /etc/shadow.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

from xce.client import XceClient
from xce.client.http import job_path
from xce.store.files import safe_relative_path
from xce.worker.executor import RunningJob

log = logging.getLogger("xce.worker.staging")


def _base(host: str, job_id: str) -> str:
    return f"/api/v1/workers/{quote(host)}/jobs/{job_path(job_id)}"


async def fetch_inputs(client: XceClient, host: str, job: RunningJob) -> None:
    a = job.assignment
    for rel in a.get("inputs", []):
        rel = safe_relative_path(rel, "input path")
        target = job.job_dir / rel
        if not target.resolve().is_relative_to(job.job_dir.resolve()):
            raise ValueError(f"input {rel} would land outside the job directory")
        data = await client.request(
            "GET", f"{_base(host, a['job_id'])}/inputs/{quote(rel)}",
            params={"attempt": str(a["attempt"])},
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def collect_outputs(job: RunningJob) -> list[tuple[str, Path]]:
    """(name, local path) of every file to return: stdout, stderr, declared outputs.

    stdout and stderr are read through the descriptors opened before the job started
    (`RunningJob.readers`) when the worker still has them, whatever the path holds now.
    """
    meta = job.job_dir / ".xce"
    files = [(name, meta / name) for name in ("stdout", "stderr")
             if name in job.readers or _regular_file(meta / name)]
    root = job.work_dir.resolve()
    seen: set[str] = set()
    for pattern in job.assignment.get("outputs", []):
        for path in sorted(job.work_dir.glob(pattern)):
            if path.is_symlink() or not path.is_file():
                continue
            resolved = path.resolve()
            if not resolved.is_relative_to(root):
                log.warning("job %s: output %s is outside the job directory, skipped",
                            job.key[0], path)
                continue
            rel = resolved.relative_to(root).as_posix()
            if rel.startswith(".xce/") or rel in seen:
                continue
            seen.add(rel)
            files.append((rel, resolved))
    return files


def _regular_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


async def _from_reader(fd: int) -> AsyncIterator[bytes]:
    """The whole file behind `fd`, from its start (pread: the descriptor's position is
    shared with nobody, and the live tail reads the same descriptor)."""
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        offset += len(chunk)
        yield chunk


async def _from_file(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(1 << 16):
            yield chunk


async def _from_path(path: Path) -> AsyncIterator[bytes]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 16):
            yield chunk


async def upload_outputs(client: XceClient, host: str, job: RunningJob) -> list[str]:
    a = job.assignment
    names = []
    for i, (name, path) in enumerate(collect_outputs(job)):
        stream = path.parent == job.job_dir / ".xce"  # stdout or stderr
        fd = job.readers.get(name) if stream else None
        if fd is not None:
            chunks = _from_reader(fd)
        elif stream:
            chunks = _from_path(path)  # no symlink as the last component, at least
        else:
            chunks = _from_file(path)
        params = {"attempt": str(a["attempt"])}
        if i == 0:
            params["first"] = "1"
        await client.request(
            "PUT", f"{_base(host, a['job_id'])}/outputs/{quote(name)}", params=params,
            data=chunks, headers={"Content-Type": "application/octet-stream"},
        )
        names.append(name)
    return names
