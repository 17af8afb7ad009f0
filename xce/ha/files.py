"""Files beside the replicated log: job inputs and outputs, the users file, the audit log.

The WAL holds what a job *is*; the files it needs (staged inputs, returned outputs) live in
the controller's file store, and the users file and the audit log beside the state. None
of them is an event, so the replication link carries them next to the records:

- **Job files** are shipped as content-addressed blobs: a `fileData` `put` carries the
  file in chunks of `CHUNK` (never the whole file in memory, on either side) with its
  SHA-256, and the standby writes it under a temporary name and renames it into place only
  once the content matches (fsynced, directory too); it records that digest beside the
  file as the primary does (xce/store/digests.py), so its downloads and listings after a
  failover carry the same `X-XCE-SHA256` without reading the file again. The
  primary queues uploads as they arrive, a job's inputs (a `move:` of the standby's copy
  of the upload, or the content if it never had it) *before* the record that submits the
  job, and outputs as the worker returns them, so on the link they precede the records
  that name them; an upload, a submit with inputs and an output upload wait, in `sync`
  mode, for a standby's `fileAck` of them, the same way a commit waits for the record's
  ack (a large file: as long as its pieces keep leaving).
- **Catch-up**: a standby compares what its records name (a job's `spec.inputs`, a finished
  job's `outputs`) with what it holds, after a connect, a checkpoint transfer and each
  batch of records, and asks for what is missing (`fileWant`).
- **The users file** is sent whole at connect, after each change through the API (waited
  for in `sync` mode) and when it changes on disk (`xce user --file`).
- **The audit log** is append-only: the standby says how many bytes it holds and their
  SHA-256 in its hello; if they are the start of the primary's log, only what follows is
  sent (`append`), otherwise the whole log replaces it and the standby keeps its old copy
  as `audit.log.diverged-<time>`: audit lines are never thrown away.

- **Back to the primary**: a primary asks a standby that connects for the job files its
  records name that it lacks (stored there while that candidate was primary and not
  replicated before the failover) and takes them, never replacing a file it has. Until
  then such a file is answered 503 `file_not_replicated` naming the other candidates.

Names on the link are logical (`files/jobs/...`, `files/uploads/<id>`, `users`, `audit`)
and checked on arrival: nothing can write outside the file store, the users file or the
audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce.core import events as ev
from xce.core.errors import InvalidRequest
from xce.core.file_owners import job_inputs_spent
from xce.store import digests
from xce.store.files import safe_relative_path
from xce.store.replicated_names import (
    _UPLOAD,
    AUDIT,
    FILES,
    MOVE,
    USERS,
    input_name,
    output_name,
)
from xce.store.wal.writer import fsync_dir

log = logging.getLogger("xce.ha.files")
CHUNK = 4 * 1024 * 1024


def users_path_of(config: Any) -> Path | None:
    """The first `configfile` backend's users file: the one the user routes edit."""
    auth = config.auth
    for section in auth.backends:
        if section.get("type") == "configfile" and isinstance(section.get("path"), str):
            return (auth.base / Path(section["path"]).expanduser()).resolve()
    return None


@dataclass(frozen=True)
class FileSpace:
    """Where the logical names live on this controller."""

    state_dir: Path
    users_path: Path | None = None

    @property
    def files_root(self) -> Path:
        return self.state_dir / "files"

    @property
    def audit_path(self) -> Path:
        return self.state_dir / "audit.log"

    def path_of(self, name: str) -> Path | None:
        """The local path of a logical name; None for a users file this side has none of;
        InvalidRequest for a name that could leave its place."""
        if name == USERS:
            return self.users_path
        if name == AUDIT:
            return self.audit_path
        if name.startswith(FILES):
            rel = safe_relative_path(name[len(FILES) :], "replicated file")
            if not (rel.startswith("jobs/") or _UPLOAD.match(rel)):
                raise InvalidRequest(f"replicated file {name!r} is not a job's file or an upload")
            return self.files_root / rel
        raise InvalidRequest(f"unknown replicated file {name!r}")

    def missing(self, names: Iterable[str]) -> list[str]:
        out = []
        for name in names:
            with contextlib.suppress(InvalidRequest):
                path = self.path_of(name)
                if path is not None and not path.is_file():
                    out.append(name)
        return out


def names_of_job(job: Any) -> Iterator[str]:
    """The files a job record names: its inputs (unless it was killed before it started:
    then they were deleted, xce/controller/job_files.py) and, once it ended, its outputs."""
    if not job_inputs_spent(job):
        for rel in job.spec.inputs:
            yield input_name(job.number, rel)
    if job.state.finished:
        for rel in job.outputs:
            yield output_name(job.number, job.id, rel)


def names_in_state(state: Any) -> list[str]:
    """Every file the state's records name (arrays share one set of inputs)."""
    return names_in_records(list(state.arrays.values()), list(state.jobs.values()))


def names_in_records(arrays: list[Any], jobs: list[Any]) -> list[str]:
    """`names_in_state` over copies of the record lists: safe in a thread (the lists are
    copied on the loop in a few milliseconds, the names of a million jobs take a second)."""
    names: dict[str, None] = {}
    started = {j.number for j in jobs if j.array_index is not None and j.start_time is not None}
    for array in arrays:
        if array.finished and array.id not in started:
            continue  # killed before any task started: its inputs were deleted
        for rel in array.spec.inputs:
            names[input_name(array.id, rel)] = None
    for job in jobs:
        for name in names_of_job(job):
            names[name] = None
    return list(names)


async def missing_in_state(space: FileSpace, state: Any) -> list[str]:
    """The files the state's records name that are not here, worked out in a thread."""
    arrays, jobs = list(state.arrays.values()), list(state.jobs.values())
    return await asyncio.to_thread(lambda: space.missing(names_in_records(arrays, jobs)))


def names_in_events(state: Any, events: Iterable[ev.Event]) -> Iterator[str]:
    """The files the records of one applied batch name (submitted inputs, returned outputs)."""
    for event in events:
        if isinstance(event, (ev.JobSubmitted, ev.ArraySubmitted)):
            for rel in event.spec.inputs:
                yield input_name(event.number, rel)
        elif isinstance(event, ev.JobFinished) and event.outputs:
            with contextlib.suppress(Exception):
                job = state.job(event.job_id)
                for rel in event.outputs:
                    yield output_name(job.number, job.id, rel)


def sha256_of(path: Path, limit: int | None = None) -> bytes:
    digest = hashlib.sha256()
    left = limit
    with path.open("rb") as f:
        while left is None or left > 0:
            piece = f.read(CHUNK if left is None else min(CHUNK, left))
            if not piece:
                break
            digest.update(piece)
            if left is not None:
                left -= len(piece)
    return digest.digest()


def audit_mark(path: Path) -> tuple[int, bytes]:
    """(size, SHA-256) of an audit log, for the hello."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0, b""
    return size, sha256_of(path, size)


async def send_put(
    writer: Any,
    epoch: int,
    name: str,
    path: Path,
    ticket: int = 0,
    progress: Callable[[], None] | None = None,
) -> int:
    """Send the file at `path` as a `put` of `name` in `CHUNK` pieces, read one at a time
    in a thread (a file of `max_upload_mb` never sits in memory whole); the last piece
    carries the SHA-256 of all of them. Returns the bytes sent, -1 if there is no file."""
    from xce.ha import protocol

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1
    digest = hashlib.sha256()
    offset = 0
    with os.fdopen(fd, "rb") as f:
        piece = await asyncio.to_thread(f.read, CHUNK)
        while True:
            following = await asyncio.to_thread(f.read, CHUNK) if piece else b""
            digest.update(piece)
            last = not following
            await protocol.send(
                writer,
                "fileData",
                epoch,
                {
                    "ticket": ticket,
                    "name": name,
                    "op": "put",
                    "offset": offset,
                    "data": piece,
                    "last": last,
                    "sha256": digest.digest() if last else b"",
                },
            )
            offset += len(piece)
            if progress is not None:
                progress()  # a piece left (drained): sync waits keep waiting
            if last:
                return offset
            piece = following


def read_from(path: Path, offset: int, limit: int = CHUNK) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def _mkdirs(path: Path, root: Path) -> None:
    missing = []
    while path != root and not path.is_dir():
        missing.append(path)
        path = path.parent
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for part in reversed(missing):
        part.mkdir(exist_ok=True, mode=0o700)


class Receiver:
    """The standby's side: apply `fileData` operations to this controller's files. Runs
    in a thread per message (writes and fsyncs must not stall the link's loop)."""

    def __init__(self, space: FileSpace) -> None:
        self.space = space
        self._parts: dict[str, tuple[Path, Any, Any]] = {}  # name -> (tmp, file, digest)

    def apply(self, body: dict[str, Any]) -> bool:
        """Apply one operation; False when the standby needs the whole file again (an
        audit append that does not fit what it holds)."""
        name, op = str(body["name"]), str(body["op"])
        path = self.space.path_of(name)
        if path is None:
            return True  # a users file this standby does not configure
        root = self.space.files_root if name.startswith(FILES) else path.parent
        if op == "drop":
            self._abort(name)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            if name.startswith(FILES):
                digests.forget(root, path)
            return True
        if op.startswith(MOVE):
            return self._move(self.space.path_of(op[len(MOVE) :]), path, root)
        if op == "append":
            if name != AUDIT:
                raise InvalidRequest(f"append is only for the audit log, not {name!r}")
            return self._append(path, int(body["offset"]), bytes(body["data"]))
        if op != "put":
            raise InvalidRequest(f"unknown file operation {op!r}")
        if int(body["offset"]) == 0:
            self._abort(name)
            _mkdirs(path.parent, root)
            tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.part"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            self._parts[name] = (tmp, os.fdopen(fd, "wb"), hashlib.sha256())
        part = self._parts.get(name)
        if part is None:
            raise InvalidRequest(f"a chunk of {name} arrived without its beginning")
        tmp, out, digest = part
        data = bytes(body["data"])
        out.write(data)
        digest.update(data)
        if not body["last"]:
            return True
        del self._parts[name]
        out.flush()
        os.fsync(out.fileno())
        out.close()
        if digest.digest() != bytes(body["sha256"]):
            tmp.unlink(missing_ok=True)
            raise InvalidRequest(f"{name} arrived with the wrong content (SHA-256 differs)")
        if name == AUDIT:
            self._set_aside(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        if name == USERS:  # under the lock `xce user --file` takes (UsersFile.edit)
            lock = path.with_name(path.name + ".lock")
            with open(lock, "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                os.replace(tmp, path)
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
        if name.startswith(FILES):  # the link's own digest: the file need not be read again
            digests.record(root, path, digest.hexdigest())
        return True

    @staticmethod
    def _move(source: Path | None, target: Path, root: Path) -> bool:
        """An upload the primary attached to a job: moved here as it was there. One this
        standby never received is asked for after the record that names it."""
        if source is None or not source.is_file():
            return True
        _mkdirs(target.parent, root)
        os.replace(source, target)
        fsync_dir(target.parent)
        fsync_dir(source.parent)
        digests.move(root, source, target)
        return True

    def _append(self, path: Path, offset: int, data: bytes) -> bool:
        size = path.stat().st_size if path.exists() else 0
        if offset != size:
            if offset < size and read_from(path, offset, len(data)) == data:
                return True  # already here (sent again after a reconnect)
            log.warning(
                "the audit log here (%d bytes) does not fit the primary's lines at "
                "%d: asking for the whole log",
                size,
                offset,
            )
            return False
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        return True

    @staticmethod
    def _set_aside(path: Path) -> None:
        """Keep this standby's own audit log before the primary's replaces it."""
        if path.exists() and path.stat().st_size:
            aside = path.with_name(f"{path.name}.diverged-{int(time.time())}")
            os.replace(path, aside)
            log.warning("this standby's audit log differs from the primary's: kept as %s", aside)

    def _abort(self, name: str) -> None:
        part = self._parts.pop(name, None)
        if part is not None:
            part[1].close()
            part[0].unlink(missing_ok=True)

    def close(self) -> None:
        for name in list(self._parts):
            self._abort(name)
