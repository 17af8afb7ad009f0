"""`xce job wait` on an array: its tasks done out of all, and how many are in each state,
as a Rich progress bar on stderr. Only on a terminal: piped, or with `--quiet`, nothing is
drawn, so a script reading stderr sees only errors. Rich is imported only when a bar is
drawn, so `xce job wait` keeps its fast start."""

from __future__ import annotations

import sys
from typing import Any

# the order the states are named in, most advanced first; others follow as the view has them
_ORDER = ("DONE", "EXIT", "RUN", "USUSP", "SSUSP", "PEND", "PSUSP")
ENDED = ("DONE", "EXIT")


def describe(counts: dict[str, int]) -> str:
    """`3 DONE, 1 EXIT, 2 RUN, 4 PEND`: the states an array's tasks are in, none at 0."""
    named = [s for s in _ORDER if counts.get(s)]
    named += sorted(s for s, n in counts.items() if n and s not in _ORDER)
    return ", ".join(f"{counts[s]} {s}" for s in named)


class ArrayProgress:
    """The bar of one array, started on the first view of it that `update` gets; `close`
    leaves its last figures on the terminal."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.bar: Any = None
        self.task: Any = None

    @staticmethod
    def wanted(quiet: bool) -> bool:
        """A bar only for a person watching: stderr is a terminal and not `--quiet`."""
        return not quiet and sys.stderr.isatty()

    def update(self, view: dict[str, Any]) -> None:
        """Redraw from an array's view (`GET /api/v1/jobs/{id}`); a job that is not an
        array draws nothing."""
        array = view.get("array")
        if view.get("kind") != "array" or not isinstance(array, dict):
            return
        counts: dict[str, int] = array.get("counts") or {}
        done = sum(counts.get(s, 0) for s in ENDED)
        states = describe(counts)
        if self.bar is not None:
            self.bar.update(self.task, completed=done, states=states)
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            "{task.fields[states]}",
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        # the task first, then the start: its first drawing has the figures already
        self.task = self.bar.add_task(
            f"job {self.job_id}", total=array.get("total") or 0, completed=done, states=states
        )
        self.bar.start()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
