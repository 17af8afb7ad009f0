"""Every file operation on a job's tree, through descriptors that never leave the tree.

Why: a job is hostile code and any path in its tree may be a symlink, a FIFO or a directory
swapped for a symlink at any moment. The functions here are meant to run inside
`as_user(creds, fn, ...)` (xce/worker/attempt/fscreds.py), so the kernel checks every
open/mkdir/stat as the job's user; on top of that they never follow a symlink inside the tree:
each path is walked one component at a time with O_NOFOLLOW (O_DIRECTORY for directories)
from a descriptor of the top directory, directories are listed with os.scandir on a
descriptor, every open is O_CLOEXEC and O_NONBLOCK (a planted FIFO cannot hang the worker),
and only what fstat says is a regular file is kept. Each function also works unprivileged
(for a non-root worker).

Descriptors returned are process-wide: the caller (root, on the loop) reads and closes them.
The top directories themselves (job_dir, work_dir) are given by root and opened as the user:
every directory above them must be searchable by the user.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "MAX_OUTPUTS",
    "JobFiles",
    "close_outputs",
    "open_input_target",
    "open_outputs",
    "prepare_job_files",
    "remove_file",
    "remove_tree",
]

MAX_OUTPUTS = 10_000  # output files collected per job; more is a warning
MAX_SCANNED = 200_000  # directory entries looked at while matching patterns
MAX_DEPTH = 64  # directory levels below work_dir that '**' descends
REMOVE_BATCH = 4096  # directory entries listed at a time while emptying a job directory

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class JobFiles:
    """The job's output streams and script, made in job_dir/.xce as the user."""

    stdout: int  # write descriptors handed to the job
    stderr: int
    stdout_reader: int  # read-only descriptors of the very same files (inode checked)
    stderr_reader: int
    script: str | None  # path of the job's script (0700), if one was given

    def close(self) -> None:
        """Close all four descriptors (also usable as as_user's `discard`)."""
        for fd in (self.stdout, self.stderr, self.stdout_reader, self.stderr_reader):
            with contextlib.suppress(OSError):
                os.close(fd)


def close_outputs(found: tuple[list[tuple[str, int]], list[str]]) -> None:
    """Close the descriptors open_outputs returned (also usable as as_user's `discard`)."""
    for _, fd in found[0]:
        with contextlib.suppress(OSError):
            os.close(fd)


def _regular_or_close(fd: int, what: str) -> int:
    """`fd` if it is a regular file, made blocking again; otherwise close it and raise."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{what} is not a regular file")
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


def _create(name: str, mode: int, dir_fd: int) -> int:
    fd = os.open(name, _NEW, mode, dir_fd=dir_fd)
    os.fchmod(fd, mode)  # whatever the umask
    return fd


def prepare_job_files(
    job_dir: str, script: str | None, hostfile: str | None = None, nodefile: str | None = None
) -> JobFiles:
    """Create job_dir/.xce (0700) with stdout, stderr (0600) and `script` (0700) if given,
    `hostfile` (0600, the allocation's `host slots` lines: XCE_HOSTFILE) and `nodefile`
    (0600, one host name per slot: LSB_DJOB_HOSTFILE, PBS_NODEFILE) if given.

    job_dir exists already (made by root, 0700, owned by the user). Everything is created
    through an O_NOFOLLOW|O_DIRECTORY descriptor of job_dir and with O_EXCL, so a planted
    symlink (.xce itself or a file in it) or any existing file is an OSError.
    """
    opened: list[int] = []
    try:
        top = os.open(job_dir, _DIR)
        opened.append(top)
        with contextlib.suppress(FileExistsError):
            os.mkdir(".xce", 0o700, dir_fd=top)
        meta = os.open(".xce", _DIR, dir_fd=top)
        opened.append(meta)
        writers = []
        for name in ("stdout", "stderr"):
            writers.append(_create(name, 0o600, meta))
            opened.append(writers[-1])
        readers = []
        for name, writer in zip(("stdout", "stderr"), writers, strict=True):
            reader = _regular_or_close(os.open(name, _READ, dir_fd=meta), name)
            opened.append(reader)
            mine, theirs = os.fstat(reader), os.fstat(writer)
            if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
                raise OSError(errno.EAGAIN, f"{job_dir}/.xce/{name} changed while created")
            readers.append(reader)
        path = None
        if script is not None:
            fd = _create("script", 0o700, meta)
            with os.fdopen(fd, "wb") as f:
                f.write(script.encode())
            path = os.path.join(job_dir, ".xce", "script")
        for name, text in (("hostfile", hostfile), ("nodefile", nodefile)):
            if text is not None:
                fd = _create(name, 0o600, meta)
                with os.fdopen(fd, "wb") as f:
                    f.write(text.encode())
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    os.close(meta)
    os.close(top)
    return JobFiles(writers[0], writers[1], readers[0], readers[1], path)


def enter_problem(path: str) -> str | None:
    """Why the calling thread (run as the job's user) could not start in directory `path`,
    or None. Resolving `path/.` needs search permission on every component and on `path`
    itself, which is what the keeper's chdir as the user needs; no read permission is
    asked for, so a 0711 directory is fine."""
    try:
        fd = os.open(os.path.join(path, "."), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    return None


def _parts(rel: str, what: str) -> list[str]:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{what} {rel!r} must be relative, without '..', '.' or empty parts")
    if "\0" in rel:
        raise ValueError(f"{what} {rel!r} contains a NUL byte")
    return parts


def open_input_target(job_dir: str, rel: str) -> int:
    """A write descriptor (truncated, 0600) for the input file job_dir/rel.

    Intermediate directories are created (0700) and entered one at a time with
    O_NOFOLLOW|O_DIRECTORY from a descriptor of job_dir; the file must be a regular file.
    """
    parts = _parts(rel, "input path")
    fd = os.open(job_dir, _DIR)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            fd, parent = os.open(part, _DIR, dir_fd=fd), fd
            os.close(parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
        target = os.open(parts[-1], flags | os.O_CLOEXEC, 0o600, dir_fd=fd)
    finally:
        os.close(fd)
    return _regular_or_close(target, f"input {rel}")


def remove_file(job_dir: str, rel: str) -> None:
    """Unlink job_dir/rel (an input that was not fetched whole or did not verify), walking
    the directories with O_NOFOLLOW|O_DIRECTORY from a descriptor of job_dir: a symlink the
    job planted on the way is an OSError, and a final symlink is unlinked itself, never its
    target. A file already gone is fine."""
    parts = _parts(rel, "input path")
    fd = os.open(job_dir, _DIR)
    try:
        for part in parts[:-1]:
            fd, parent = os.open(part, _DIR, dir_fd=fd), fd
            os.close(parent)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether `entry` itself (never a symlink's target) is a directory; False if unknowable
    (a directory the job made unsearchable, on a file system without d_type)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether `entry` itself is a regular file (the opened descriptor is checked again)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


class _Matcher:
    """Glob matching on directory descriptors, never following a symlink."""

    def __init__(self, skip_meta: bool, warnings: list[str]) -> None:
        self.skip_meta, self.warnings = skip_meta, warnings
        self.scanned = 0
        self.capped = self.too_deep = False

    def _entries(self, fd: int, prefix: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(fd) as it:  # never more than the cap into memory
                entries = sorted(
                    itertools.islice(it, max(0, MAX_SCANNED - self.scanned) + 1),
                    key=lambda e: e.name,
                )
        except OSError as exc:
            self.warnings.append(f"cannot list {prefix or '.'}: {exc.strerror or exc}")
            return []
        self.scanned += len(entries)
        if self.scanned > MAX_SCANNED and not self.capped:
            self.capped = True
            self.warnings.append(
                f"more than {MAX_SCANNED} entries scanned for outputs: matching stopped"
            )
        if self.skip_meta and not prefix:
            entries = [e for e in entries if e.name != ".xce"]
        return entries

    def _subdir(self, fd: int, name: str) -> int | None:
        try:
            return os.open(name, _DIR, dir_fd=fd)
        except OSError:  # a symlink now, gone, or not ours to read: skipped
            return None

    def match(self, fd: int, prefix: str, parts: list[str], depth: int) -> Iterator[str]:
        """Relative names of regular files under `fd` matching `parts`."""
        if self.capped:
            return
        if depth > MAX_DEPTH:
            if not self.too_deep:
                self.too_deep = True
                self.warnings.append(f"outputs deeper than {MAX_DEPTH} directories skipped")
            return
        part, rest = parts[0], parts[1:]
        if part == "**":
            yield from self.match(fd, prefix, rest or ["*"], depth)  # 'd/**': every file
            subdirs = [e.name for e in self._entries(fd, prefix) if _is_dir(e)]
            pattern = parts
        else:
            entries = [e for e in self._entries(fd, prefix) if fnmatch.fnmatchcase(e.name, part)]
            if not rest:
                yield from (prefix + e.name for e in entries if _is_file(e))
                return
            subdirs = [e.name for e in entries if _is_dir(e)]
            pattern = rest
        for name in subdirs:
            sub = self._subdir(fd, name)
            if sub is not None:
                try:
                    yield from self.match(sub, f"{prefix}{name}/", pattern, depth + 1)
                finally:
                    os.close(sub)


def _open_under(top: int, rel: str) -> int:
    """A read descriptor of top/rel, walking each component with O_NOFOLLOW."""
    parts = rel.split("/")
    fd = top
    try:
        for part in parts[:-1]:
            fd, parent = os.open(part, _DIR, dir_fd=fd), fd
            if parent != top:
                os.close(parent)
        return _regular_or_close(os.open(parts[-1], _READ, dir_fd=fd), rel)
    finally:
        if fd != top:
            os.close(fd)


def _on_procfs(fd: int) -> bool:
    try:
        return os.fstat(fd).st_dev == os.stat("/proc").st_dev
    except OSError:
        return True  # no /proc to compare with: refuse rather than guess


def open_outputs(
    work_dir: str, patterns: list[str], skip_meta: bool
) -> tuple[list[tuple[str, int]], list[str]]:
    """([(name relative to work_dir, read descriptor)], [warnings]) for the output patterns.

    Patterns are globs relative to work_dir ('**' is any number of directories); absolute
    ones and any with a '..' part are refused with a warning. Only regular files reached
    without a symlink are returned, each name once, at most MAX_OUTPUTS; `.xce` at the top is
    skipped when `skip_meta`. A file that vanished or cannot be read is left out with a
    warning. Nothing here raises for what the job did to its tree.
    """
    warnings: list[str] = []
    found: list[tuple[str, int]] = []
    try:
        top = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return [], [f"cannot open the working directory {work_dir}: {exc.strerror or exc}"]
    if _on_procfs(top):
        # This thread belongs to the root worker: /proc/self (or /dev/fd, or the worker's
        # pid) would be the worker's own files, readable by its own thread group.
        os.close(top)
        return [], [f"outputs are not collected from {work_dir}: it is in /proc"]
    seen: set[str] = set()
    matcher = _Matcher(skip_meta, warnings)
    try:
        for pattern in patterns:
            parts = [p for p in pattern.split("/") if p not in ("", ".")]
            if pattern.startswith("/") or ".." in parts or not parts or "\0" in pattern:
                warnings.append(
                    f"output pattern {pattern!r} refused: it must be relative and without '..'"
                )
                continue
            for rel in matcher.match(top, "", parts, 0):
                if rel in seen:
                    continue
                try:
                    rel.encode("utf-8")
                except UnicodeEncodeError:
                    warnings.append(
                        f"output {rel.encode('utf-8', 'replace')!r} skipped: its name is not UTF-8"
                    )
                    seen.add(rel)
                    continue
                if len(seen) >= MAX_OUTPUTS:
                    warnings.append(f"more than {MAX_OUTPUTS} output files: the rest skipped")
                    return found, warnings
                seen.add(rel)
                try:
                    found.append((rel, _open_under(top, rel)))
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE):
                        warnings.append(
                            f"out of descriptors after {len(found)} outputs: the rest skipped"
                        )
                        return found, warnings
                    warnings.append(f"output {rel} skipped: {exc.strerror or exc}")
    except BaseException:
        close_outputs((found, warnings))
        raise
    finally:
        os.close(top)
    return found, warnings


def _enter(name: str, dir_fd: int | None, dev: int | None) -> tuple[int, int]:
    """(read descriptor, st_dev) of the directory `name`, never a symlink; a directory the
    job made unreadable or unwritable to its owner is chmod'ed back to 0700 first."""
    path_fd = os.open(
        name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
    )
    try:
        st = os.fstat(path_fd)
        if dev is not None and st.st_dev != dev:
            raise OSError(errno.EXDEV, "another file system is mounted there")
        this = f"/proc/self/fd/{path_fd}"  # this very inode, whatever its name holds now
        if st.st_mode & 0o700 != 0o700:
            os.chmod(this, 0o700)
        return os.open(this, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), st.st_dev
    finally:
        os.close(path_fd)


class _Remover:
    """Depth-first removal on descriptors. Directories deeper than MAX_DEPTH are renamed to
    the top and removed on a later pass, so a job's very deep tree costs neither recursion
    nor a descriptor per level."""

    def __init__(self, top: int, dev: int) -> None:
        self.top, self.dev = top, dev
        self.errors: list[str] = []
        self.moved = 0

    def empty(self, fd: int, where: str, depth: int) -> None:
        # In batches: a directory of millions of entries (hard links cost the job no
        # inodes) must not become a list of millions of names in the worker's memory.
        while True:
            with os.scandir(fd) as it:
                names = [e.name for e in itertools.islice(it, REMOVE_BATCH)]
            removed = [self._remove(fd, name, where, depth) for name in names]
            if not any(removed):
                return  # empty, or only what cannot be removed is left (in self.errors)

    def _remove(self, fd: int, name: str, where: str, depth: int) -> bool:
        """Remove `name` (moved to the top when too deep); False if it stays."""
        try:
            os.unlink(name, dir_fd=fd)  # a symlink goes here: the link, never its target
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.EPERM):  # EPERM: unlink(dir) elsewhere
                self.errors.append(f"{where}{name}: {exc.strerror}")
                return False
        try:
            if depth >= MAX_DEPTH:
                os.rename(
                    name, f".xce-deep-{os.urandom(8).hex()}", src_dir_fd=fd, dst_dir_fd=self.top
                )
                self.moved += 1
                return True
            sub, _ = _enter(name, fd, self.dev)
            try:
                self.empty(sub, f"{where}{name}/", depth + 1)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
            return True
        except OSError as exc:
            self.errors.append(f"{where}{name}: {exc.strerror or exc}")
            return False


def remove_tree(path: str) -> None:
    """Remove the contents of the job directory `path` without following any symlink.

    Meant to run as the job's user; `path` itself is left for the caller (root) to rmdir.
    Everything that can be removed is; then an OSError names what could not be.
    """
    top, dev = _enter(path, None, None)
    remover = _Remover(top, dev)
    try:
        for _ in range(10_000):
            remover.moved = 0
            remover.empty(top, f"{path}/", 0)
            if not remover.moved or remover.errors:
                break
    finally:
        os.close(top)
    if remover.errors:
        errors = remover.errors
        raise OSError(errno.ENOTEMPTY, f"{len(errors)} left in {path}: {'; '.join(errors[:3])}")
