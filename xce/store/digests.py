"""The SHA-256 of every file in the job file store, recorded beside it so it is taken once.

Each file under the store's root (`uploads/<id>`, `jobs/<n>/inputs/...`,
`jobs/<n>/outputs/...`) has its record at the same relative path under `digests/`: a small
JSON object with the digest and the size and mtime (ns) of the file it was taken of. The
records mirror the files' own tree (a file where a file is, a directory where a directory
is), so no output name a job chooses can collide with a record, as a sibling `name.sha256`
could.

The digest is taken while a body streams in (xce/store/files.py) and, on a standby, from
the replication link's own check (xce/ha/files.py). A record whose size or mtime does not
match its file (a file from before digests were kept, one replaced behind the store's back,
a stale record of a file since deleted) is not trusted: the digest is then computed once
from the file and recorded again. Records are a cache: one that cannot be written costs a
second read later, never a wrong answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path

DIR = "digests"
HEX = re.compile(r"^[0-9a-f]{64}$")
PIECE = 4 * 1024 * 1024  # what one thread call hashes of a file without a record


def record_path(root: Path, path: Path) -> Path | None:
    """Where the record of the store file `path` lives (None: not a file of the store)."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return None
    if not rel.parts or rel.parts[0] == DIR:
        return None
    return root / DIR / rel


def _mkdirs(path: Path, root: Path) -> None:
    """`path` and its missing parents under `root`, 0700; a stale record file standing
    where a directory must be (a file that has since become a directory) is removed."""
    missing = []
    while path != root and not path.is_dir():
        if path.is_symlink() or path.exists():
            path.unlink()
        missing.append(path)
        path = path.parent
    for part in reversed(missing):
        part.mkdir(exist_ok=True, mode=0o700)


def record(root: Path, path: Path, sha256: str, st: os.stat_result | None = None) -> None:
    """Record `sha256` as the digest of the file at `path` as it is now (`st`: its stat,
    when the caller has it). Best effort: a record not written is computed again later."""
    target = record_path(root, path)
    if target is None or not HEX.match(sha256):
        return
    tmp: Path | None = None
    try:
        st = st or os.stat(path, follow_symlinks=False)
        _mkdirs(target.parent, root)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)  # records of a directory that is now a file
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}, out)
        os.replace(tmp, target)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def recorded(root: Path, path: Path, st: os.stat_result) -> str | None:
    """The recorded digest of `path` if the record is of the file as `st` describes it."""
    target = record_path(root, path)
    if target is None:
        return None
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            meta = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    digest = meta.get("sha256")
    if (
        not isinstance(digest, str)
        or not HEX.match(digest)
        or meta.get("size") != st.st_size
        or meta.get("mtime_ns") != st.st_mtime_ns
    ):
        return None
    return digest


def forget(root: Path, path: Path) -> None:
    """Drop the record of a file, or every record under a directory, of the store."""
    target = record_path(root, path)
    if target is None:
        return
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            target.unlink()


def move(root: Path, source: Path, target: Path) -> None:
    """A file of the store was renamed: its record follows it (a rename keeps the size
    and mtime the record was taken of, so it stays valid). Best effort, like `record`."""
    old, new = record_path(root, source), record_path(root, target)
    if old is None or new is None:
        return
    try:
        if not old.is_file() or old.is_symlink():
            forget(root, target)
            return
        _mkdirs(new.parent, root)
        if new.is_dir() and not new.is_symlink():
            shutil.rmtree(new)
        os.replace(old, new)
    except OSError:
        forget(root, target)


def hash_piece(fd: int, digest: hashlib._Hash, offset: int) -> int:
    """Feed up to PIECE bytes of `fd` from `offset` to `digest` (in a thread); returns
    how many were read, 0 at the end."""
    data = os.pread(fd, PIECE, offset)
    digest.update(data)
    return len(data)
