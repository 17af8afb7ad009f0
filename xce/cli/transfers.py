"""The CLI's side of file transfers: where downloads go, and the progress shown meanwhile.

`xce job output` streams a file to stdout or into `--dest DIR`, and `xce job submit` streams
its `--stage-in` files up; neither ever holds a whole file (see xce/client/transfer.py for
the rules: idle timeouts, resume, digests). What is written is exactly what arrived:
stdout gets every byte through a loop over os.write (a raw write of a few GiB returns a
short count, and with PYTHONUNBUFFERED=1 `sys.stdout.buffer` is that raw file), and a
`--dest` file is written under a temporary name and renamed into place only once its digest
matched, so a damaged or partial download is never left looking like the file.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from xce.client.transfer import Progress

STREAMS = ("stdout", "stderr")
PART_SUFFIX = ".xce-part"


class StdoutGone(Exception):
    """The reader of our stdout went away (`xce job output 7 | head`): stop quietly."""


class FdSink:
    """Writes to a descriptor (stdout), every byte: short writes are continued, and a
    non-blocking descriptor (one a shell or a parent left O_NONBLOCK) is waited for. A
    pipe cannot be rewound, so `restart` says no (the download skips what it delivered)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                select.select([], [self.fd], [])
                continue
            except BrokenPipeError:
                raise StdoutGone from None
            view = view[n:]
            self.written += n

    async def restart(self) -> bool:
        return False


class FileSink:
    """A `--dest` file: written as `.NAME.xce-part` beside it (created new, never through a
    symlink), renamed to NAME by `keep` once verified, removed by `discard` otherwise."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.part = target.with_name(f".{target.name}{PART_SUFFIX}")
        with contextlib.suppress(FileNotFoundError):
            self.part.unlink()  # an earlier, interrupted run's
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        # A buffered file: its write() writes everything or raises.
        self.file = os.fdopen(os.open(self.part, flags, 0o666), "wb")

    async def write(self, data: bytes) -> None:
        self.file.write(data)

    async def restart(self) -> bool:
        self.file.seek(0)
        self.file.truncate()
        return True

    def keep(self) -> None:
        self.file.close()
        os.replace(self.part, self.target)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            self.part.unlink()


def safe_name(name: str) -> str:
    """A file name from the controller's listing, as a path relative to --dest: no absolute
    path, no `..`, no empty part, no NUL (the controller checks the same when outputs come
    back; a client does not write outside the directory it was given whatever it is told)."""
    parts = name.split("/")
    if not name or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"refusing the file name {name!r} from the controller")
    return name


def entry_name(entry: dict[str, Any]) -> str:
    """A listing entry's name: `name` (the transfer contract), else `path` (older
    controllers)."""
    return str(entry.get("name") or entry["path"])


class Bars:
    """Progress on stderr with `rich.progress` (bytes, rate, time left), one line per file;
    nothing at all when disabled (stderr not a terminal, --quiet): rich is then not even
    imported."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None

    def __enter__(self) -> Bars:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def track(
        self, description: str, total: int | None = None, lazy: bool = False
    ) -> Progress | None:
        """A callback that moves a new line's bar, or None when disabled. `lazy`: the line
        appears only once the callback is first called (a step that may not happen, such
        as hashing a file before it is sent to an older controller)."""
        progress = self._progress
        if progress is None:
            return None
        tasks: list[Any] = [] if lazy else [progress.add_task(description, total=total)]

        def update(done: int, size: int | None) -> None:
            if not tasks:
                tasks.append(progress.add_task(description, total=total))
            progress.update(tasks[0], completed=done, total=size)

        return update


def show_progress(quiet: bool, to_stdout: bool = False) -> bool:
    """Progress is drawn on a terminal's stderr only, never with --quiet, and not over data
    that goes to the same terminal."""
    if quiet or not _isatty(sys.stderr):
        return False
    return not (to_stdout and _isatty(sys.stdout))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress_for(quiet: bool, to_stdout: bool = False) -> Iterator[Bars]:
    with Bars(show_progress(quiet, to_stdout)) as bars:
        yield bars


async def to_stdout(client: Any, job_id: str, name: str, bars: Bars) -> None:
    """Stream one of the job's files to stdout (fd 1)."""
    sys.stdout.flush()  # nothing of ours may land in the middle of the file
    await client.download(job_id, name, FdSink(1), bars.track(name))


async def to_directory(
    client: Any,
    job_id: str,
    dest: Path,
    everything: bool,
    bars: Bars,
    report: Callable[[str], None],
) -> list[str]:
    """Download the job's declared outputs (and stdout and stderr with `everything`) into
    `dest`, each verified before it takes its name. Returns the problems (one line each);
    `report` is told each path written."""
    from xce.client.errors import ApiError

    entries = await client.files(job_id)
    problems: list[str] = []
    for entry in entries:
        name = entry_name(entry)
        if name in STREAMS and not everything:
            continue
        try:
            target = dest / safe_name(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            sink = FileSink(target)
        except (ValueError, OSError) as exc:
            problems.append(f"{name}: {exc}")
            continue
        try:
            await client.download(job_id, name, sink, bars.track(name, entry.get("size")))
            sink.keep()
        except (ApiError, OSError) as exc:
            sink.discard()
            problems.append(exc.message if isinstance(exc, ApiError) else f"{name}: {exc}")
            continue
        except BaseException:
            sink.discard()
            raise
        report(str(target))
    return problems
