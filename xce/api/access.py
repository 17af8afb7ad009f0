"""The one helper the job handlers use for scoped access (self / group / all).

Routes only check that the caller holds *some* scope of `job:view` or `job:control`; which
jobs that covers depends on the job's owner, so the handlers ask here with the job in hand.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from xce.api.http import AUTH, SERVICE, identity
from xce.core.rbac import check_job, job_scope, may_touch
from xce.core.state_base import parse_job_id


def _groups_of(request: web.Request) -> Callable[[str], tuple[str, ...]]:
    return request.app[AUTH].directory.groups_of


def job_owner(request: web.Request, job_id: str) -> str:
    """The user owning a job, task or array (404 when there is none)."""
    state = request.app[SERVICE].state
    number, index = parse_job_id(job_id)
    if index is None and number in state.arrays:
        return state.arrays[number].spec.user
    return state.job(job_id).spec.user


def require_job(request: web.Request, job_id: str, action: str) -> None:
    """403 unless the caller may `action` (job:view / job:control) this job."""
    who = identity(request)
    check_job(
        who.user,
        who.groups,
        who.permissions,
        action,
        job_owner(request, job_id),
        job_id,
        _groups_of(request),
    )


def visible_owners(request: web.Request) -> Callable[[str], bool] | None:
    """For listings: a predicate on job owners, or None when the caller sees every job."""
    who = identity(request)
    if job_scope(who.permissions, "job:view") == "all":
        return None
    groups_of = _groups_of(request)
    return lambda owner: may_touch(
        who.user, who.groups, who.permissions, "job:view", owner, groups_of
    )
