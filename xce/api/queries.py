"""Read-side queries over `ClusterState`: job listings with filters and paging."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xce.api.views import job_view, pending_rest_view
from xce.core.model import JobState
from xce.core.state import ClusterState

# `user=all`: every user's jobs (those the caller may see), as `bjobs -u all` lists them.
ALL_USERS = "all"


@dataclass(frozen=True)
class JobFilter:
    states: frozenset[str] = frozenset()
    user: str | None = None
    queue: str | None = None
    host: str | None = None
    array: int | None = None
    # Whose jobs the caller may see (RBAC scope); None: everyone's.
    visible: Callable[[str], bool] | None = None

    @property
    def owner(self) -> str | None:
        """The one user whose jobs are asked for; None for every user, `ALL_USERS` included."""
        return None if self.user == ALL_USERS else self.user


def list_jobs(
    state: ClusterState,
    reasons: Mapping[str, str],
    flt: JobFilter,
    offset: int,
    limit: int,
    now: float,
) -> tuple[list[dict[str, Any]], int]:
    """Jobs (and not-yet-started array tasks, one row per array) in submission order."""
    rows: list[tuple[tuple[int, int], Any]] = []
    owner = flt.owner
    for job in state.jobs.values():
        if flt.states and job.state.value not in flt.states:
            continue
        if owner and job.spec.user != owner:
            continue
        if flt.visible is not None and not flt.visible(job.spec.user):
            continue
        if flt.queue and job.spec.queue != flt.queue:
            continue
        if flt.host and job.host != flt.host:
            continue
        if flt.array is not None and job.array_id != flt.array:
            continue
        rows.append((job.order_key, job))
    if flt.host is None:
        for array in state.arrays.values():
            if not array.pending:
                continue
            shown = JobState.PSUSP if array.held else JobState.PEND
            if flt.states and shown.value not in flt.states:
                continue
            if owner and array.spec.user != owner:
                continue
            if flt.visible is not None and not flt.visible(array.spec.user):
                continue
            if flt.queue and array.spec.queue != flt.queue:
                continue
            if flt.array is not None and array.id != flt.array:
                continue
            rows.append(((array.id, 2**31), array))
    rows.sort(key=lambda r: r[0])
    total = len(rows)
    page = rows[offset : offset + limit]
    out = []
    for _, item in page:
        if hasattr(item, "pending"):
            out.append(pending_rest_view(item, reasons))
        else:
            out.append(job_view(item, reasons, now))
    return out, total
