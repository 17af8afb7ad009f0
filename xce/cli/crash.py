"""Start-up failures as one line and the path of a log that keeps the traceback.

An unexpected exception while a role or `xce up` starts used to print a Python traceback: a
wall of text for whoever typed the command, and in a journal forty lines where one says what
went wrong. `crashed()` writes the traceback to `<dir>/<what>-error.log` (0600, appended,
timed) in the role's own state directory when it already exists, else in
`$XDG_STATE_HOME/xce` (`~/.local/state/xce`), and fails with one line naming the exception and
that file. Where no log can be written the traceback is printed after all: never lost.
Expected failures (`XceError`, unreadable files) stay one line without a log, as before.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from xce.cli.common import fail


def fallback_dir() -> Path:
    """Where a failure is logged before (or without) a state directory of its own."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "xce"


def _append(log: Path, text: str) -> bool:
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(text)
        return True
    except OSError:
        return False


def write_log(what: str, exc: BaseException, dirs: Iterable[Path | None]) -> Path | None:
    """Append `exc`'s traceback to the first writable `<dir>/<what>-error.log`: the existing
    `dirs` in order, then `fallback_dir()` (created 0700). None when none could be written."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    text = f"{stamp} xce {what} (pid {os.getpid()}):\n" + "".join(traceback.format_exception(exc))
    for d in dirs:
        if d is not None and d.is_dir() and _append(d / f"{what}-error.log", text):
            return d / f"{what}-error.log"
    fallback = fallback_dir()
    try:
        fallback.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return fallback / f"{what}-error.log" if _append(fallback / f"{what}-error.log", text) else None


def crashed(what: str, exc: BaseException, dirs: Iterable[Path | None] = ()) -> NoReturn:
    """Fail with `xce: error: <what> failed: <Type>: <message> (traceback in <log>)`."""
    summary = " ".join(f"{type(exc).__name__}: {exc}".split())
    log = write_log(what, exc, dirs)
    if log is None:
        traceback.print_exception(exc, file=sys.stderr)  # nowhere else to keep it
        fail(f"{what} failed: {summary}")
    fail(f"{what} failed: {summary} (traceback in {log})")
