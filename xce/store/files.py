"""Job files on the controller's local disk: uploads, job inputs and returned outputs.

There is no shared storage: users upload inputs here, workers fetch them before a job starts
and return outputs here after it ends, and users download them. Every path that comes from
outside goes through `safe_relative_path`, so nothing can escape its directory.

Everything here is 0600 in 0700 directories: only the controller's account reads it, and
users reach files only through the API's checks. An upload belongs to whoever sent it (a
`<id>.json` next to it says who and when): only they (or an admin) can use it in a job or
delete it, and it is deleted when no job has used it within `upload_ttl_s`. A job's files
(the inputs its uploads became, the outputs its workers return) belong to the job's owner
until they are deleted with the job (xce/controller/job_files.py). Everything a user holds
here, uploads and job files alike, counts against their `upload_quota_mb`
(xce/store/job_bytes.py), so no user can fill the controller's disk, where the WAL lives.

Sites without shared storage move every input and output through here, so files may be as
large as HPC data is: there is no per-file cap unless `max_upload_mb` sets one, bodies
stream through the store's own threads (xce/store/incoming.py) and are refused from their
Content-Length before they are read where they would pass a limit (xce/store/room.py), and
every file's SHA-256 is taken as it arrives and recorded beside it (xce/store/digests.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from xce.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    TooLarge,
    Unavailable,
)
from xce.store import digests
from xce.store.fileio import Handle, Threads
from xce.store.incoming import Expected, Piece, Stored, receive
from xce.store.job_bytes import INPUTS, Held, JobBytes, tree_held
from xce.store.room import MB, DiskRoom, Promise, amount, free_bytes, sized

_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
RESERVED_OUTPUTS = ("stdout", "stderr")
# Many empty uploads cost inodes, not bytes: a user may hold this many unused ones at most.
MAX_UPLOADS_PER_USER = 10_000


_amount = amount  # the name older callers import


@dataclass(frozen=True)
class Upload:
    """A staged upload: who sent it (None: a file from before uploads had owners, which
    only an admin may use), its size, and when it was stored."""

    owner: str | None
    size: int
    created: float


class StoredUpload(NamedTuple):
    """What `save_upload` kept: the upload's id, size and hex SHA-256."""

    upload_id: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Opened:
    """A store file open for reading: its descriptor (a `Handle`: close it), its size and
    the SHA-256 of its whole content, as of the moment it was opened."""

    handle: Handle
    size: int
    sha256: str


def safe_relative_path(text: str, what: str = "path") -> str:
    """Normalise a relative POSIX path, refusing anything that could leave its directory."""
    if not isinstance(text, str) or not text or "\x00" in text or "\\" in text:
        raise InvalidRequest(f"{what} {text!r} is not a valid relative path")
    if len(text) > 1024:
        raise InvalidRequest(f"{what} is longer than 1024 characters")
    path = PurePosixPath(text)
    if path.is_absolute():
        raise InvalidRequest(f"{what} {text!r} must be relative, not absolute")
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise InvalidRequest(f"{what} {text!r} may not contain '..' or be empty")
    return "/".join(parts)


def job_dir_name(job_id: str) -> str:
    """`17[5]` -> `17_5`: a task id as a directory name."""
    return job_id.replace("[", "_").replace("]", "")


class FileStore:
    """Files under `root`; writes go to a temporary name and are renamed into place.

    Limits: `max_bytes` per file (0: none), `quota_bytes` of uploads and job files per owner,
    `job_outputs_bytes` of outputs per job attempt, and `reserve_bytes` left free on the
    disk. Each is checked from a body's declared size before it is read (`check_upload`,
    `check_output`, and again atomically as a transfer starts) and while it streams."""

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        quota_bytes: int = 10240 * MB,
        ttl_s: float = 86400.0,
        job_outputs_bytes: int = 10240 * MB,
        reserve_bytes: int = 0,
        free: Callable[[Path], int] = free_bytes,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.job_outputs_bytes = job_outputs_bytes
        self._returned: dict[str, int] = {}  # bytes of outputs stored per job attempt
        self.quota_bytes = quota_bytes
        self.ttl_s = ttl_s
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in (root, root / "uploads", root / "jobs"):
            path.mkdir(exist_ok=True, mode=0o700)
            path.chmod(0o700)  # also a directory an older version made with the umask's mode
        self.room = DiskRoom(root, reserve_bytes, free)
        self.threads = Threads()
        self.uploads: dict[str, Upload] = {}
        self.jobs = JobBytes()  # the files of each owner's jobs (`adopt` fills it at start)
        self._inflight: dict[str, int] = {}  # bytes of files being received, per owner
        # Digests being computed for files without a record, by (device, inode, size,
        # mtime): two downloads of one old file read it once.
        self._hashing: dict[tuple[int, int, int, int], asyncio.Future[str]] = {}
        self._scan_uploads()

    @property
    def reserve_bytes(self) -> int:
        return self.room.reserve

    @reserve_bytes.setter
    def reserve_bytes(self, value: int) -> None:
        self.room.reserve = value

    def close(self) -> None:
        """The controller's term ended: no more file I/O from this store's threads."""
        self.threads.close()

    def _mkdirs(self, path: Path) -> None:
        """`path` and any missing directory between `root` and it, each 0700 (mkdir's
        `parents=True` would make the intermediate ones with the umask's mode)."""
        missing = []
        while path != self.root and not path.is_dir():
            missing.append(path)
            path = path.parent
        for part in reversed(missing):
            part.mkdir(exist_ok=True, mode=0o700)

    # --- limits ---------------------------------------------------------------------------

    def _check_cap(self, name: str, size: int, known: bool = True) -> None:
        if self.max_bytes and size > self.max_bytes:
            raise TooLarge(
                f"{name}: {sized(size, known)} is over the limit of {amount(self.max_bytes)} "
                "per file ([controller] max_upload_mb)"
            )

    def _check_quota(self, name: str, owner: str, size: int, grow: int, known: bool) -> None:
        used = self.usage(owner)
        if used + grow > self.quota_bytes:
            staged = sum(u.size for u in self.uploads.values() if u.owner == owner)
            jobs = self.jobs.of(owner).bytes
            arriving = used - staged - jobs
            raise TooLarge(
                f"{name}: {sized(size, known)} would take {owner} over the quota: "
                f"{owner} holds {amount(used)} on the controller ({amount(staged)} in "
                f"uploads no job has used yet, {amount(jobs)} in the files of their jobs"
                + (f", {amount(arriving)} arriving" if arriving > 0 else "")
                + f"), and the limit is {amount(self.quota_bytes)} ([controller] "
                "upload_quota_mb); delete unused uploads (DELETE /api/v1/uploads/ID) or "
                "kill jobs that have not started; finished jobs' files go with the job"
            )

    def _check_outputs(self, name: str, job_id: str, size: int, grow: int, known: bool) -> None:
        total = self._returned.get(job_id, 0) + grow
        if total > self.job_outputs_bytes:
            raise TooLarge(
                f"{name}: {sized(size, known)} would take the outputs of job {job_id} to "
                f"{amount(total)}, over the limit of {amount(self.job_outputs_bytes)} per "
                "job ([controller] max_job_outputs_mb)"
            )

    def _check_count(self, owner: str | None) -> None:
        if owner is None:
            return
        count = sum(1 for u in self.uploads.values() if u.owner == owner)
        if count >= MAX_UPLOADS_PER_USER:
            raise QuotaExceeded(
                f"{owner} has {count} uploads no job has used yet, the "
                f"most one user may hold; delete some or use them first"
            )

    def check_upload_room(self, owner: str | None, size: int | None, name: str = "upload") -> None:
        """Refuse an upload of declared `size` that could not be kept, before its body is
        read (413 `too_large`); `save_upload` checks again as it starts."""
        self._check_count(owner)
        if size is None:
            return
        self._check_cap(name, size)
        if owner is not None:
            self._check_quota(name, owner, size, size, True)
        self.room.check(name, size, size)

    def check_output_room(
        self, job_id: str, rel: str, size: int | None, owner: str | None = None
    ) -> None:
        """Refuse an output of declared `size` that could not be kept (over the cap, the
        job's outputs limit, its `owner`'s quota or the disk's reserve), before its body is
        read; `save_output` checks again as it starts."""
        if size is None:
            return
        self._check_cap(rel, size)
        self._check_outputs(rel, job_id, size, size, True)
        if owner is not None:
            self._check_quota(rel, owner, size, size, True)
        self.room.check(rel, size, size)

    # --- uploads --------------------------------------------------------------------------

    def _upload_file(self, upload_id: str) -> Path:
        return self.root / "uploads" / upload_id

    def _meta_file(self, upload_id: str) -> Path:
        return self.root / "uploads" / f"{upload_id}.json"

    def _scan_uploads(self) -> None:
        """Rebuild the index from the directory (at start): owners from the `.json` files,
        ownerless older uploads dated by their mtime; a `.json` whose file is gone is
        removed, and so is a digest record whose upload is gone."""
        base = self.root / "uploads"
        for entry in os.scandir(base):
            name = entry.name
            if _UPLOAD_ID.match(name) and entry.is_file(follow_symlinks=False):
                owner: str | None = None
                created = entry.stat(follow_symlinks=False).st_mtime
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    meta = json.loads(self._meta_file(name).read_text())
                    owner = str(meta["owner"]) if meta.get("owner") is not None else None
                    created = float(meta.get("created", created))
                self.uploads[name] = Upload(
                    owner, entry.stat(follow_symlinks=False).st_size, created
                )
            elif name.endswith(".json") and not (base / name[:-5]).is_file():
                with contextlib.suppress(OSError):
                    os.unlink(base / name)
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.root / digests.DIR / "uploads"):
                if entry.name not in self.uploads:
                    digests.forget(self.root, base / entry.name)

    def usage(self, owner: str) -> int:
        """Bytes `owner` holds here: uploads no job has used yet, the files of their jobs
        in any state, and what is arriving for them now. What the quota counts."""
        staged = sum(u.size for u in self.uploads.values() if u.owner == owner)
        return staged + self.jobs.of(owner).bytes + self._inflight.get(owner, 0)

    def holdings(self) -> dict[str, Held]:
        """Every owner's bytes and files here (uploads and job files; not what is still
        arriving), for the admin's view of usage."""
        out = self.jobs.owners()
        for upload in self.uploads.values():
            if upload.owner is not None:
                held = out.setdefault(upload.owner, Held())
                held.bytes += upload.size
                held.files += 1
        return out

    async def save_upload(
        self,
        chunks: AsyncIterator[Piece],
        owner: str | None = None,
        now: float | None = None,
        declared: int | None = None,
        sha256: Expected = None,
    ) -> StoredUpload:
        """Store an upload of `owner` (`declared`: its Content-Length, None if unknown;
        `sha256`: the digest its sender declared). One over a limit is refused (413) before
        its first byte where its size is declared, else where it passes the limit, and
        nothing of it is kept."""
        name = "upload"
        upload_id = secrets.token_hex(16)
        created = time.time() if now is None else now
        reserved = 0
        promise: Promise | None = None

        def count(size: int, batch: int = 0) -> None:
            nonlocal reserved
            known = declared is not None and size <= declared
            self._check_cap(name, size, known)
            if owner is not None and size > reserved:
                self._check_quota(name, owner, size, size - reserved, known)
                self._inflight[owner] = self._inflight.get(owner, 0) + size - reserved
                reserved = size
            if promise is not None:
                promise.take(batch)

        self._check_count(owner)
        target = self._upload_file(upload_id)
        try:
            if owner is not None:
                self._check_quota(name, owner, declared or 0, 0, True)  # a lowered quota
            count(declared or 0)  # the declared size: refused before any byte is read
            promise = self.room.promise(name, declared)
            stored = await receive(self.threads, self.root, target, chunks, count, name, sha256)
            try:
                fd = os.open(
                    self._meta_file(upload_id),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o600,
                )
                with os.fdopen(fd, "w") as out:
                    json.dump({"owner": owner, "created": created}, out)
            except OSError as exc:
                target.unlink(missing_ok=True)
                digests.forget(self.root, target)
                raise Unavailable(f"cannot store the file: {exc.strerror}") from None
            self.uploads[upload_id] = Upload(owner, stored.size, created)
        finally:
            if promise is not None:
                promise.close()
            if owner is not None:
                left = self._inflight.get(owner, 0) - reserved
                if left > 0:
                    self._inflight[owner] = left
                else:
                    self._inflight.pop(owner, None)
        return StoredUpload(upload_id, stored.size, stored.sha256)

    def _owned(self, upload_id: str, owner: str | None) -> Upload:
        """The upload if it exists and `owner` may use it (None: anyone's, for admins);
        someone else's is reported as missing, so ids of others' uploads reveal nothing."""
        if not isinstance(upload_id, str) or not _UPLOAD_ID.match(upload_id):
            raise InvalidRequest(f"{upload_id!r} is not an upload id")
        found = self.uploads.get(upload_id)
        if (
            found is None
            or not self._upload_file(upload_id).is_file()
            or (owner is not None and found.owner != owner)
        ):
            raise NotFound(f"upload {upload_id} does not exist (upload the file first)")
        return found

    def check_upload(self, upload_id: str, owner: str | None = None) -> None:
        self._owned(upload_id, owner)

    def _forget(self, upload_id: str) -> None:
        self.uploads.pop(upload_id, None)
        with contextlib.suppress(OSError):
            self._meta_file(upload_id).unlink()

    def delete_upload(self, upload_id: str, owner: str | None = None) -> Upload:
        """Delete an upload no job has used; `owner` None may delete anyone's (admins)."""
        found = self._owned(upload_id, owner)
        with contextlib.suppress(FileNotFoundError):
            self._upload_file(upload_id).unlink()
        digests.forget(self.root, self._upload_file(upload_id))
        self._forget(upload_id)
        return found

    def list_uploads(self, owner: str | None) -> dict[str, Upload]:
        return {
            k: u
            for k, u in sorted(self.uploads.items(), key=lambda kv: kv[1].created)
            if owner is None or u.owner == owner
        }

    def sweep_uploads(self, now: float | None = None) -> list[str]:
        """Delete uploads no job used within `ttl_s`, and partial files left as old by a
        crash mid-upload; returns the deleted upload ids."""
        now = time.time() if now is None else now
        expired = [k for k, u in self.uploads.items() if now - u.created > self.ttl_s]
        for upload_id in expired:
            with contextlib.suppress(FileNotFoundError):
                self._upload_file(upload_id).unlink()
            digests.forget(self.root, self._upload_file(upload_id))
            self._forget(upload_id)
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.root / "uploads"):
                if entry.name.endswith(".part"):
                    with contextlib.suppress(OSError):
                        if now - entry.stat(follow_symlinks=False).st_mtime > self.ttl_s:
                            os.unlink(entry.path)
        return expired

    def attach_inputs(self, number: int, inputs: dict[str, str], owner: str | None = None) -> None:
        """Move uploads into a job's input directory; `inputs` maps path -> upload id.
        Each upload's digest record moves with it (a rename keeps what it was taken of).
        The bytes stay on the quota: of the job's `owner` now."""
        if not inputs:
            return
        size = sum(self.uploads[u].size for u in inputs.values() if u in self.uploads)
        job = self.root / "jobs" / str(number)
        staging = job / f".inputs.{secrets.token_hex(4)}"
        moved: list[tuple[Path, Path]] = []
        try:
            for rel, upload_id in inputs.items():
                target = staging / rel
                self._mkdirs(target.parent)
                source = self._upload_file(upload_id)
                os.replace(source, target)
                moved.append((target, source))
            shutil.rmtree(job / "inputs", ignore_errors=True)
            os.replace(staging, job / "inputs")
            for upload_id in inputs.values():  # a job's input now, on the job owner's quota
                self._forget(upload_id)
            if owner is not None:
                self.jobs.set(number, owner, INPUTS, size, len(inputs))
        except OSError as exc:
            for target, source in reversed(moved):
                with contextlib.suppress(OSError):
                    os.replace(target, source)
            shutil.rmtree(staging, ignore_errors=True)
            raise InvalidRequest(f"cannot attach the inputs: {exc.strerror or exc}") from None
        digests.forget(self.root, job / "inputs")
        for rel, upload_id in inputs.items():
            digests.move(self.root, self._upload_file(upload_id), job / "inputs" / rel)

    async def save_output(
        self,
        number: int,
        job_id: str,
        rel: str,
        chunks: AsyncIterator[Piece],
        declared: int | None = None,
        sha256: Expected = None,
        owner: str | None = None,
    ) -> Stored:
        """Store an output a worker returns (`declared`: its Content-Length; `sha256`: the
        digest the worker declared) for a job of `owner`, on whose quota it counts. Over the
        per-file or per-job limit, the quota or the disk's reserve it is refused (413)
        before its first byte where its size is declared."""
        rel = safe_relative_path(rel, "output path")
        target = self._outputs(number, job_id) / rel
        part = f"outputs/{job_dir_name(job_id)}"
        reserved = 0
        promise: Promise | None = None

        def count(size: int, batch: int = 0) -> None:
            nonlocal reserved
            known = declared is not None and size <= declared
            self._check_cap(rel, size, known)
            if size > reserved:
                self._check_outputs(rel, job_id, size, size - reserved, known)
                if owner is not None:
                    self._check_quota(rel, owner, size, size - reserved, known)
                    self._inflight[owner] = self._inflight.get(owner, 0) + size - reserved
                self._returned[job_id] = self._returned.get(job_id, 0) + size - reserved
                reserved = size
            if promise is not None:
                promise.take(batch)

        stored: Stored | None = None
        before = -1  # the size of the file this one replaces, -1: none
        try:
            count(declared or 0)  # the declared size: refused before any byte is read
            promise = self.room.promise(rel, declared)
            self._mkdirs(target.parent)
            with contextlib.suppress(OSError):  # a file sent again replaces the first copy
                earlier = target.lstat()
                if stat.S_ISREG(earlier.st_mode):
                    before = earlier.st_size
            stored = await receive(self.threads, self.root, target, chunks, count, rel, sha256)
            if owner is not None:
                new_file = 1 if before < 0 else 0
                self.jobs.add(number, owner, part, stored.size - max(before, 0), new_file)
            return stored
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            # `out` a file and `out/x` as well (or the other way round): the job's names
            # clash; a 409 for this file, never a 500 the worker would retry for ever.
            raise Conflict(
                f"output {rel} clashes with another output of job {job_id} "
                "(a file and a directory of one name)"
            ) from None
        finally:
            if promise is not None:
                promise.close()
            if owner is not None and reserved:
                left = self._inflight.get(owner, 0) - reserved
                if left > 0:
                    self._inflight[owner] = left
                else:
                    self._inflight.pop(owner, None)
            if stored is None and reserved and job_id in self._returned:
                left = self._returned[job_id] - reserved  # a refused file counts for nothing
                if left > 0:
                    self._returned[job_id] = left
                else:
                    self._returned.pop(job_id, None)

    def outputs_done(self, job_id: str) -> None:
        """The attempt's report is in: its outputs are all here, nothing more to count."""
        self._returned.pop(job_id, None)

    async def clear_outputs(self, number: int, job_id: str) -> None:
        """Remove an earlier attempt's outputs (the first file of a new return), in a store
        thread: a tree of many thousand files must not stall the event loop."""
        self._returned.pop(job_id, None)
        base = self._outputs(number, job_id)
        self.jobs.drop(number, f"outputs/{job_dir_name(job_id)}")

        def clear() -> None:
            shutil.rmtree(base, ignore_errors=True)
            digests.forget(self.root, base)

        await self.threads.run(clear)

    # --- a job's files as a whole ---------------------------------------------------------

    def _job_dir(self, number: int) -> Path:
        return self.root / "jobs" / str(number)

    def delete_job_files(self, number: int, inputs_only: bool = False) -> Future[None]:
        """Delete job `number`'s files (only its inputs: `inputs_only`). They leave the
        owner's usage at once; the tree is removed in a store thread (the future says when:
        a tree of many thousand files must not stall the event loop). Deleting what is
        already gone is a no-op, so a replay may ask again."""
        path = self._job_dir(number) / INPUTS if inputs_only else self._job_dir(number)
        self.jobs.drop(number, INPUTS if inputs_only else None)

        def remove() -> None:
            shutil.rmtree(path, ignore_errors=True)
            digests.forget(self.root, path)

        return self.threads.submit(remove)

    async def adopt(self, owners: dict[int, str], spent: set[int]) -> list[int]:
        """Take over the job directories at the start of a primary term: those of the jobs
        in `owners` (job or array number -> user) count on their owner's usage; those of
        jobs the records no longer hold (purged, or never committed, while this controller
        was down or a standby) are deleted, and so are the inputs of jobs in `spent` (killed
        before they started) and staging left by a crash. Returns the job numbers whose
        directories were deleted."""

        def scan() -> tuple[list[tuple[int, str, str, Held]], list[int]]:
            found: list[tuple[int, str, str, Held]] = []
            removed: list[int] = []
            with os.scandir(self.root / "jobs") as entries:
                numbers = [
                    (int(e.name), Path(e.path))
                    for e in entries
                    if e.name.isdigit() and e.is_dir(follow_symlinks=False)
                ]
            for number, path in sorted(numbers):
                owner = owners.get(number)
                if owner is None or str(number) != path.name:
                    shutil.rmtree(path, ignore_errors=True)
                    digests.forget(self.root, path)
                    removed.append(number)
                    continue
                with os.scandir(path) as parts:
                    names = [(p.name, Path(p.path)) for p in parts]
                for name, part in names:
                    if name.startswith(".inputs.") or (name == INPUTS and number in spent):
                        shutil.rmtree(part, ignore_errors=True)
                        digests.forget(self.root, part)
                    elif name == INPUTS:
                        found.append((number, owner, INPUTS, tree_held(part)))
                    elif name == "outputs":
                        with os.scandir(part) as tasks:
                            for task in tasks:
                                if task.is_dir(follow_symlinks=False):
                                    held = tree_held(Path(task.path))
                                    found.append((number, owner, f"outputs/{task.name}", held))
            return found, removed

        found, removed = await self.threads.run(scan)
        self.jobs.clear()
        for number, owner, part, held in found:
            self.jobs.add(number, owner, part, held.bytes, held.files)
        return removed

    # --- reading ------------------------------------------------------------------------

    def _outputs(self, number: int, job_id: str) -> Path:
        return self.root / "jobs" / str(number) / "outputs" / job_dir_name(job_id)

    def input_path(self, number: int, rel: str) -> Path:
        path = self.root / "jobs" / str(number) / "inputs" / safe_relative_path(rel, "input path")
        if not path.is_file() or path.is_symlink():
            raise NotFound(f"input {rel} of job {number} does not exist")
        return path

    def output_path(self, number: int, job_id: str, rel: str) -> Path:
        path = self._outputs(number, job_id) / safe_relative_path(rel, "output path")
        if not path.is_file() or path.is_symlink():
            raise NotFound(f"job {job_id} has no output file {rel}")
        return path

    def _scan_outputs(self, base: Path) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not base.is_dir():
            return out
        for path in sorted(base.rglob("*")):
            if path.name.endswith(".part"):
                continue
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = path.relative_to(base).as_posix()
            out.append(
                {
                    "path": rel,
                    "name": rel,
                    "size": st.st_size,
                    "sha256": digests.recorded(self.root, path, st),
                }
            )
        return out

    async def list_outputs(self, number: int, job_id: str) -> list[dict[str, Any]]:
        """The attempt's outputs: path (and `name`, the same), size and SHA-256 (None for a
        file whose digest was never recorded: `digest` computes it). Read in a thread: a
        job may have many thousands of outputs."""
        return await self.threads.run(self._scan_outputs, self._outputs(number, job_id))

    async def digest(self, path: Path) -> str:
        """The SHA-256 of a store file: its record, else computed once and recorded."""
        opened = await self.open(path)
        opened.handle.close()
        return opened.sha256

    async def open(self, path: Path) -> Opened:
        """Open a store file for reading (never through a symlink, regular files only),
        with its size and digest as of now: files are only ever replaced whole (renamed
        into place), so the descriptor's content is what the digest describes."""

        def opening() -> tuple[int, os.stat_result, str | None]:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise FileNotFoundError(path)
                return fd, st, digests.recorded(self.root, path, st)
            except BaseException:
                os.close(fd)
                raise

        try:
            fd, st, known = await self.threads.run(opening)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"{path.name} does not exist") from None
        except OSError as exc:
            raise NotFound(f"{path.name} cannot be read: {exc.strerror or exc}") from None
        handle = Handle(self.threads, fd)
        try:
            sha256 = known or await self._computed(path, handle, st)
        except BaseException:
            handle.close()
            raise
        return Opened(handle, st.st_size, sha256)

    async def _computed(self, path: Path, handle: Handle, st: os.stat_result) -> str:
        """The digest of a file that has no valid record: read once (in pieces, so one old
        file does not hold a store thread for minutes), recorded, shared by concurrent
        askers of the same file."""
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        running = self._hashing.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._hashing[key] = future
        try:
            digest = hashlib.sha256()
            offset = 0
            while read := await handle.call(digests.hash_piece, digest, offset):
                offset += read
            value = digest.hexdigest()
            await self.threads.run(digests.record, self.root, path, value, st)
            future.set_result(value)
            return value
        except BaseException as exc:
            gone = Unavailable(
                f"the digest of {path.name} was being taken for a request that went away; retry"
            )
            future.set_exception(exc if isinstance(exc, Exception) else gone)
            future.exception()  # retrieved: askers that wait see it, nobody else must
            raise
        finally:
            self._hashing.pop(key, None)
