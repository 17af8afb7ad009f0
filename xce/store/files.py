"""Job files on the controller's local disk: uploads, job inputs and returned outputs.

There is no shared storage: users upload inputs here, workers fetch them before a job starts
and return outputs here after it ends, and users download them. Every path that comes from
outside goes through `safe_relative_path`, so nothing can escape its directory.

Everything here is 0600 in 0700 directories: only the controller's account reads it, and
users reach files only through the API's checks. An upload belongs to whoever sent it (a
`<id>.json` next to it says who and when): only they (or an admin) can use it in a job or
delete it, it counts against their `upload_quota_mb` until a job uses it, and it is deleted
when no job has used it within `upload_ttl_s`, so uploads cannot fill the controller's disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from xce.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Unavailable,
)

_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
RESERVED_OUTPUTS = ("stdout", "stderr")
MB = 1024 * 1024
# Many empty uploads cost inodes, not bytes: a user may hold this many unused ones at most.
MAX_UPLOADS_PER_USER = 10_000


def _amount(size: int) -> str:
    return f"{size / MB:.1f} MB" if size >= MB // 10 else f"{size} bytes"


@dataclass(frozen=True)
class Upload:
    """A staged upload: who sent it (None: a file from before uploads had owners, which
    only an admin may use), its size, and when it was stored."""

    owner: str | None
    size: int
    created: float


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
    """Files under `root`; writes go to a temporary name and are renamed into place."""

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        quota_bytes: int = 10240 * MB,
        ttl_s: float = 86400.0,
        job_outputs_bytes: int = 10240 * MB,
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
        self.uploads: dict[str, Upload] = {}
        self._inflight: dict[str, int] = {}  # bytes of uploads being received, per owner
        self._scan_uploads()

    def _mkdirs(self, path: Path) -> None:
        """`path` and any missing directory between `root` and it, each 0700 (mkdir's
        `parents=True` would make the intermediate ones with the umask's mode)."""
        missing = []
        while path != self.root and not path.is_dir():
            missing.append(path)
            path = path.parent
        for part in reversed(missing):
            part.mkdir(exist_ok=True, mode=0o700)

    # --- writing ------------------------------------------------------------------------

    async def _write(
        self,
        target: Path,
        chunks: AsyncIterator[bytes],
        account: Callable[[int], None] | None = None,
    ) -> int:
        self._mkdirs(target.parent)
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.part"
        size = 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise PayloadTooLarge(
                            f"file is larger than the limit of {self.max_bytes} bytes"
                        )
                    if account is not None:
                        account(size)
                    out.write(chunk)
            if target.is_symlink():
                target.unlink()
            os.replace(tmp, target)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
                raise Unavailable(f"cannot store the file: {exc.strerror}") from None
            raise
        finally:
            if tmp.exists():
                tmp.unlink()
        return size

    # --- uploads --------------------------------------------------------------------------

    def _upload_file(self, upload_id: str) -> Path:
        return self.root / "uploads" / upload_id

    def _meta_file(self, upload_id: str) -> Path:
        return self.root / "uploads" / f"{upload_id}.json"

    def _scan_uploads(self) -> None:
        """Rebuild the index from the directory (at start): owners from the `.json` files,
        ownerless older uploads dated by their mtime; a `.json` whose file is gone is
        removed."""
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

    def usage(self, owner: str) -> int:
        """Bytes `owner` holds in uploads no job has used yet (and is receiving now)."""
        staged = sum(u.size for u in self.uploads.values() if u.owner == owner)
        return staged + self._inflight.get(owner, 0)

    def _quota_error(self, owner: str, staged: int) -> QuotaExceeded:
        return QuotaExceeded(
            f"upload quota exceeded: {owner} has {_amount(staged)} in uploads no job has "
            f"used yet, and the limit is {_amount(self.quota_bytes)} ([controller] "
            "upload_quota_mb); delete unused uploads (DELETE /api/v1/uploads/ID) or submit "
            "the jobs that use them"
        )

    async def save_upload(
        self, chunks: AsyncIterator[bytes], owner: str | None = None, now: float | None = None
    ) -> tuple[str, int]:
        """Store an upload of `owner`; over their quota it is refused (413) and removed."""
        upload_id = secrets.token_hex(16)
        created = time.time() if now is None else now
        reserved = 0
        staged = self.usage(owner) if owner is not None else 0

        def account(size: int) -> None:
            nonlocal reserved
            if owner is None:
                return
            self._inflight[owner] = self._inflight.get(owner, 0) + size - reserved
            reserved = size
            if self.usage(owner) > self.quota_bytes:
                raise self._quota_error(owner, staged)

        if owner is not None:
            count = sum(1 for u in self.uploads.values() if u.owner == owner)
            if count >= MAX_UPLOADS_PER_USER:
                raise QuotaExceeded(
                    f"{owner} has {count} uploads no job has used yet, the "
                    f"most one user may hold; delete some or use them first"
                )
        target = self._upload_file(upload_id)
        try:
            account(0)  # already over (a quota lowered since): refused before any byte
            size = await self._write(target, chunks, account)
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
                raise Unavailable(f"cannot store the file: {exc.strerror}") from None
            self.uploads[upload_id] = Upload(owner, size, created)
        finally:
            if owner is not None:
                left = self._inflight.get(owner, 0) - reserved
                if left > 0:
                    self._inflight[owner] = left
                else:
                    self._inflight.pop(owner, None)
        return upload_id, size

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
            self._forget(upload_id)
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.root / "uploads"):
                if entry.name.endswith(".part"):
                    with contextlib.suppress(OSError):
                        if now - entry.stat(follow_symlinks=False).st_mtime > self.ttl_s:
                            os.unlink(entry.path)
        return expired

    def attach_inputs(self, number: int, inputs: dict[str, str]) -> None:
        """Move uploads into a job's input directory; `inputs` maps path -> upload id."""
        if not inputs:
            return
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
            for upload_id in inputs.values():  # a job's input now: off the owner's quota
                self._forget(upload_id)
        except OSError as exc:
            for target, source in reversed(moved):
                with contextlib.suppress(OSError):
                    os.replace(target, source)
            shutil.rmtree(staging, ignore_errors=True)
            raise InvalidRequest(f"cannot attach the inputs: {exc.strerror or exc}") from None

    async def save_output(
        self, number: int, job_id: str, rel: str, chunks: AsyncIterator[bytes]
    ) -> int:
        target = self._outputs(number, job_id) / safe_relative_path(rel, "output path")
        before = self._returned.get(job_id, 0)

        def account(size: int) -> None:
            if before + size > self.job_outputs_bytes:
                raise PayloadTooLarge(
                    f"the outputs of job {job_id} are over the limit of "
                    f"{_amount(self.job_outputs_bytes)} per job ([controller] "
                    "max_job_outputs_mb)"
                )

        try:
            size = await self._write(target, chunks, account)
            self._returned[job_id] = before + size
            return size
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            # `out` a file and `out/x` as well (or the other way round): the job's names
            # clash; a 409 for this file, never a 500 the worker would retry for ever.
            raise Conflict(
                f"output {rel} clashes with another output of job {job_id} "
                "(a file and a directory of one name)"
            ) from None

    def outputs_done(self, job_id: str) -> None:
        """The attempt's report is in: its outputs are all here, nothing more to count."""
        self._returned.pop(job_id, None)

    def clear_outputs(self, number: int, job_id: str) -> None:
        shutil.rmtree(self._outputs(number, job_id), ignore_errors=True)
        self._returned.pop(job_id, None)

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

    def list_outputs(self, number: int, job_id: str) -> list[dict[str, object]]:
        base = self._outputs(number, job_id)
        if not base.is_dir():
            return []
        out = []
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".part"):
                out.append({"path": path.relative_to(base).as_posix(), "size": path.stat().st_size})
        return out
