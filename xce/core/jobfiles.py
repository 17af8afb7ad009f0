"""The job's stdout/stderr file names (`-o`/`-e`, as bsub and sbatch spell them).

A name may hold `%J` (the job id; the array's number for a task), `%I` (the array index,
0 for a plain job), and sbatch's `%j` (the job id), `%a` (array index), `%A` (the array's
number), `%x` (the job name), `%%` (a `%`). Any other `%` sequence is refused at submit,
so a typo is not silently a file name. Pure: checked by the controller, expanded by the
worker.
"""

from __future__ import annotations

import re

from xce.core.errors import InvalidRequest

_CODE = re.compile(r"%(.)?", re.DOTALL)
CODES = "JIjaAx%"


def check_file_pattern(what: str, pattern: str | None) -> None:
    if pattern is None:
        return
    if not pattern.strip():
        raise InvalidRequest(f"the {what} file name is empty")
    for m in _CODE.finditer(pattern):
        if m.group(1) is None or m.group(1) not in CODES:
            raise InvalidRequest(
                f"the {what} file {pattern!r}: unknown {m.group(0)!r}; use %J (job id), "
                "%I (array index), %j, %a, %A, %x (job name) or %%"
            )


def expand_file_pattern(pattern: str, number: int, array_index: int | None, name: str = "") -> str:
    """The file name for one job or task (`%J` and `%A` are the job's number, as bsub's
    `%J` is the array's id for a task; `%x` the job name, `/` made `_`)."""
    values = {
        "J": str(number),
        "j": str(number),
        "A": str(number),
        "I": str(array_index or 0),
        "a": str(array_index or 0),
        "%": "%",
        "x": (name or "job").replace("/", "_"),
    }
    return _CODE.sub(lambda m: values.get(m.group(1) or "", m.group(0)), pattern)
