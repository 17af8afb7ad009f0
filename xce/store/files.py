"""Job files on the controller's local disk: uploads, job inputs and returned outputs.

There is no shared storage: users upload inputs here, workers fetch them before a job starts
and return outputs here after it ends, and users download them. Every path that comes from
outside goes through `safe_relative_path`, so nothing can escape its directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from xce.core.errors import InvalidRequest, NotFound, PayloadTooLarge, Unavailable

_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
RESERVED_OUTPUTS = ("stdout", "stderr")


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

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        for sub in ("uploads", "jobs"):
            (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    # --- writing ------------------------------------------------------------------------

    async def _write(self, target: Path, chunks: AsyncIterator[bytes]) -> int:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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

    async def save_upload(self, chunks: AsyncIterator[bytes]) -> tuple[str, int]:
        upload_id = secrets.token_hex(16)
        size = await self._write(self.root / "uploads" / upload_id, chunks)
        return upload_id, size

    def check_upload(self, upload_id: str) -> None:
        if not isinstance(upload_id, str) or not _UPLOAD_ID.match(upload_id):
            raise InvalidRequest(f"{upload_id!r} is not an upload id")
        if not (self.root / "uploads" / upload_id).is_file():
            raise NotFound(f"upload {upload_id} does not exist (upload the file first)")

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
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                source = self.root / "uploads" / upload_id
                os.replace(source, target)
                moved.append((target, source))
            shutil.rmtree(job / "inputs", ignore_errors=True)
            os.replace(staging, job / "inputs")
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
        return await self._write(target, chunks)

    def clear_outputs(self, number: int, job_id: str) -> None:
        shutil.rmtree(self._outputs(number, job_id), ignore_errors=True)

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
