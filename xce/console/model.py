"""The jobs table's data, apart from any widget: rows by stable key, arrays, sort, filter.

Rows are the API's job views (`GET /api/v1/jobs` rows and `job` stream events), keyed by job
id; the not-yet-started rest of an array is keyed `<array>[pending]`. An update replaces one
dict in place and says whether the visible order may have changed; only then is the order
rebuilt (the widget throttles rebuilds), otherwise only the painted lines are redrawn. So a
stream of usage updates costs O(1) each however many jobs there are.

Display rows (`visible`) are keys: a plain job id, `@<array>` for an array parent, and the
parent's children (task ids and the pending rest) when it is expanded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from xce.console import fmt
from xce.console.filter import JobFilter


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    width: int


COLUMNS = (
    Column("id", "JOBID", 10),
    Column("user", "USER", 7),
    Column("state", "STAT", 5),
    Column("queue", "QUEUE", 6),
    Column("host", "HOST", 6),
    Column("name", "NAME", 14),
    Column("submit", "SUBMIT", 11),
    Column("runtime", "RUNTIME", 7),
    Column("cpu", "CPU", 6),
    Column("rss", "MAXRSS", 6),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
_ALIVE = ("RUN", "USUSP", "SSUSP", "PEND", "PSUSP", "EXIT", "DONE")


def id_key(job_id: str) -> tuple[int, int]:
    """Numeric order of `17`, `17[5]`, `17[pending]` (the rest sorts after the tasks)."""
    head, _, rest = job_id.partition("[")
    try:
        number = int(head.lstrip("@"))
    except ValueError:
        return (2**62, 0)
    if not rest:
        return (number, -1)
    index = rest[:-1]
    return (number, int(index) if index.isdigit() else 2**31)


def pending_key(array_id: str) -> str:
    return f"{array_id}[pending]"


class JobModel:
    """See the module docstring. `clock` is injectable so run times are reproducible."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.rows: dict[str, dict[str, Any]] = {}
        self.children: dict[str, dict[str, None]] = {}  # array id -> child keys
        self.expanded: set[str] = set()
        self.selected: set[str] = set()
        self.sort_column = "id"
        self.descending = False
        self.filter = JobFilter()
        self.visible: list[str] = []
        self.dirty = True
        self.version = 0  # bumped on every change, for cheap "anything new?" checks
        self.count = 0  # jobs and tasks, recounted by rebuild()

    # --- changes ---------------------------------------------------------------------------

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        """Replace everything with a fresh listing (first fetch, or after a resync)."""
        self.rows.clear()
        self.children.clear()
        for row in rows:
            self._put(row)
        self.selected &= set(self.rows) | {f"@{a}" for a in self.children}
        self.dirty = True
        self.version += 1

    def _key_of(self, row: dict[str, Any]) -> str:
        if row.get("kind") == "array_pending":
            return pending_key(str(row["array_id"]))
        return str(row["id"])

    def _put(self, row: dict[str, Any]) -> str:
        key = self._key_of(row)
        self.rows[key] = row
        array_id = row.get("array_id")
        if array_id is not None:
            self.children.setdefault(str(array_id), {})[key] = None
        return key

    def upsert(self, row: dict[str, Any]) -> bool:
        """Apply one job view; True when the visible order may have changed."""
        self.version += 1
        key = self._key_of(row)
        old = self.rows.get(key)
        self._put(row)
        if old is None:
            self.dirty = True
            return True
        moved = self.sort_value(old) != self.sort_value(row) or (
            bool(self.filter) and self.filter.matches(old) != self.filter.matches(row)
        )
        if moved:
            self.dirty = True
        return moved

    def remove(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is None:
            return
        self.version += 1
        array_id = row.get("array_id")
        if array_id is not None:
            kids = self.children.get(str(array_id), {})
            kids.pop(key, None)
            if not kids:
                self.children.pop(str(array_id), None)
        self.selected.discard(key)
        self.dirty = True

    def set_array_pending(self, array_id: str, pending: dict[str, Any] | None) -> None:
        """The `array` stream event: the array's not-yet-started rest, or None when empty."""
        if pending is None:
            self.remove(pending_key(array_id))
        else:
            self.upsert(pending)

    # --- sort and filter -------------------------------------------------------------------

    def set_sort(self, column: str, descending: bool | None = None) -> None:
        if column not in COLUMN_KEYS:
            raise ValueError(f"unknown column {column!r}")
        if descending is None:
            descending = not self.descending if column == self.sort_column else False
        self.sort_column, self.descending = column, descending
        self.dirty = True

    def set_filter(self, flt: JobFilter) -> None:
        self.filter = flt
        self.dirty = True

    def toggle(self, key: str) -> None:
        """Expand or collapse an array parent (`@<id>`)."""
        array_id = key.lstrip("@")
        if array_id in self.expanded:
            self.expanded.discard(array_id)
        else:
            self.expanded.add(array_id)
        self.dirty = True

    def runtime(self, row: dict[str, Any]) -> float | None:
        start = row.get("start_time")
        if not start:
            return None
        end = row.get("end_time") or self.clock()
        return max(0.0, end - start)

    def sort_value(self, row: dict[str, Any]) -> Any:
        col = self.sort_column
        if col == "id":
            return id_key(str(row.get("id", "")))
        if col == "submit":
            return row.get("submit_time") or 0.0
        if col == "runtime":
            return self.runtime(row) or 0.0
        if col == "cpu":
            return (row.get("usage") or {}).get("cpu_time_s", 0.0)
        if col == "rss":
            return (row.get("usage") or {}).get("max_rss_bytes", 0)
        return str(row.get(col) or "")

    def parent(self, array_id: str) -> dict[str, Any]:
        """An array's summary row, computed from its children."""
        kids = [self.rows[k] for k in self.children.get(array_id, ()) if k in self.rows]
        counts: dict[str, int] = {}
        for kid in kids:
            n = kid.get("tasks", 1)
            counts[kid["state"]] = counts.get(kid["state"], 0) + n
        state = next((s for s in _ALIVE if counts.get(s)), "DONE")
        first = kids[0] if kids else {}
        usage = {
            "cpu_time_s": sum((k.get("usage") or {}).get("cpu_time_s", 0) for k in kids),
            "max_rss_bytes": max(
                [(k.get("usage") or {}).get("max_rss_bytes", 0) for k in kids] or [0]
            ),
        }
        starts = [k["start_time"] for k in kids if k.get("start_time")]
        ends = [k["end_time"] for k in kids if k.get("end_time")]
        finished = bool(kids) and len(ends) == len(kids) and state in ("DONE", "EXIT")
        end = max(ends) if finished else None
        return {
            "id": f"@{array_id}",
            "kind": "array",
            "array_id": array_id,
            "user": first.get("user"),
            "queue": first.get("queue"),
            "state": state,
            "host": None,
            "name": first.get("name"),
            "counts": counts,
            "submit_time": min([k.get("submit_time") or 0 for k in kids] or [0]),
            "start_time": min(starts) if starts else None,
            "end_time": end,
            "usage": usage,
        }

    def row(self, key: str) -> dict[str, Any] | None:
        if key.startswith("@"):
            return self.parent(key[1:])
        return self.rows.get(key)

    def rebuild(self) -> None:
        """Recompute `visible` from rows, filter, sort and expanded arrays."""
        flt = self.filter
        top: list[tuple[Any, tuple[int, int], str]] = []
        kids_of: dict[str, list[str]] = {}
        count = 0
        for key, row in self.rows.items():
            count += row.get("tasks", 1)
            if flt and not flt.matches(row):
                continue
            array_id = row.get("array_id")
            if array_id is not None:
                kids_of.setdefault(str(array_id), []).append(key)
                continue
            top.append((self.sort_value(row), id_key(key), key))
        for array_id in kids_of:
            parent = self.parent(array_id)
            top.append((self.sort_value(parent), id_key(array_id), f"@{array_id}"))
        top.sort(reverse=self.descending)
        visible: list[str] = []
        for _, _, key in top:
            visible.append(key)
            if key.startswith("@") and key[1:] in self.expanded:
                kids = kids_of[key[1:]]
                kids.sort(
                    key=lambda k: (self.sort_value(self.rows[k]), id_key(k)),
                    reverse=self.descending,
                )
                visible.extend(kids)
        self.visible = visible
        self.count = count
        self.dirty = False

    # --- display ---------------------------------------------------------------------------

    def cells(self, key: str) -> tuple[str, ...]:
        """The display strings of one row, in COLUMNS order."""
        row = self.row(key)
        if row is None:
            return ("",) * len(COLUMNS)
        usage = row.get("usage") or {}
        if key.startswith("@"):
            total = sum(row["counts"].values())
            mark = "-" if key[1:] in self.expanded else "+"
            ident = f"{mark}{key[1:]}[{total}]"
            summary = " ".join(f"{n}{s[0]}" for s, n in sorted(row["counts"].items()))
            name = f"{row.get('name') or ''} {summary}".strip()
        elif row.get("array_id") is not None:
            ident = (
                f" {row['id']}"
                if row.get("kind") != "array_pending"
                else (f" {row['id'].split('[', 1)[0]}[..{row.get('tasks', 0)}]")
            )
            name = row.get("name") or ""
        else:
            ident, name = str(row.get("id")), row.get("name") or ""
        if key in self.selected:
            ident = "*" + ident
        return (
            ident,
            str(row.get("user") or "-"),
            str(row.get("state") or "-"),
            str(row.get("queue") or "-"),
            str(row.get("host") or "-"),
            name,
            fmt.stamp(row.get("submit_time")),
            fmt.duration(self.runtime(row)),
            fmt.duration(usage.get("cpu_time_s")) if usage.get("cpu_time_s") else "-",
            fmt.size(usage.get("max_rss_bytes")),
        )

    def job_count(self) -> int:
        """Jobs and tasks, counting an array's not-yet-started rest task by task (as of the
        last rebuild, so the status line costs nothing per frame)."""
        return self.count

    def targets(self, cursor: str | None) -> list[str]:
        """Job ids an action applies to: the selection, else the row under the cursor."""
        keys = sorted(self.selected, key=id_key) if self.selected else ([cursor] if cursor else [])
        out = []
        for key in keys:
            if key.startswith("@"):
                out.append(key[1:])  # the whole array
            elif key.endswith("[pending]"):
                out.append(key.split("[", 1)[0])
            else:
                out.append(key)
        return list(dict.fromkeys(out))
