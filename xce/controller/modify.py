"""`xce job modify` (LSF bmod, Slurm scontrol update job): which events a change means.

A pending job (or a whole array with tasks left to start) may change its priority, queue,
walltime, slots, memory, resources (-R), dependencies, name and hold; an active one its
name, and its walltime by an operator or admin. An empty name clears the name of a pending
or running job alike (Slurm's `scontrol update JobName=` applies to a running job), so it
shows an unnamed job's default again. Every change is one `JobModified` event
(the new spec) plus, for hold, the suspend/resume events a `stop`/`resume` would commit, so
the WAL, replication and recovery carry it like any other change. Validation is the
submit's: the target queue's rules (who, maximums, defaults), the resource expression, the
dependency terms (existence and visibility) and the feasibility check.

A plain user may only shorten a walltime and may not raise a priority above the default;
the API decides who is privileged (job:control on every job: operators and admins).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from xce.controller.submit_checks import check_text  # the submit's rule
from xce.core import events as ev
from xce.core import queue_rules
from xce.core.deps import parse_dependency
from xce.core.errors import Conflict, Forbidden, InvalidRequest
from xce.core.model import JobSpec, JobState
from xce.core.state_base import parse_job_id
from xce.sched.admission.feasibility import refusal
from xce.sched.admission.multihost import check_span, multi_host_refusal
from xce.sched.expr import parse_requirement
from xce.sched.priority import check_job_priority

FIELDS = (
    "priority",
    "queue",
    "walltime_s",
    "slots",
    "memory_mb",
    "resources",
    "dependency",
    "name",
    "hold",
)
RUNNING_FIELDS = ("name", "walltime_s")
MAX_MEMORY_MB = 2**40


def modify_events(
    service: Any,
    job_id: str,
    changes: dict[str, Any],
    privileged: bool,
    may_view_owner: Callable[[str], bool] | None = None,
    defer: bool = False,
) -> list[ev.Event]:
    """The events that apply `changes` to `job_id`, validated; [] when nothing changes."""
    state = service.state
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise InvalidRequest(
            f"cannot modify {', '.join(unknown)} (modifiable: {', '.join(FIELDS)})"
        )
    if not changes:
        raise InvalidRequest(f"nothing to modify: give one of {', '.join(FIELDS)}")
    for key in ("name", "queue", "resources", "dependency"):
        if isinstance(changes.get(key), str):
            check_text(key, changes[key])
    number, index = parse_job_id(job_id)
    array = state.arrays.get(number) if index is None else None
    if array is not None:
        spec, waiting, label = array.spec, True, f"job array {number}"
        if not array.pending:
            raise Conflict(f"job array {number} has no task left to start: nothing to modify")
    else:
        job = state.job(job_id)
        if job.id not in state.jobs:
            raise Conflict(f"task {job_id} has not started: modify the whole array {number}")
        if job.state.finished:
            raise Conflict(f"cannot modify job {job_id}: it is {job.state.value}")
        spec, waiting, label = job.spec, job.state.waiting, f"job {job_id}"
        if not waiting:
            fixed = sorted(set(changes) - set(RUNNING_FIELDS))
            if fixed:
                raise Conflict(
                    f"{label} is {job.state.value}: only its name and walltime can "
                    f"change, not {', '.join(fixed)}"
                )
            if "walltime_s" in changes and not privileged:
                raise Forbidden(
                    f"only operators and admins may change the walltime of a "
                    f"running job ({label} is {job.state.value})"
                )
    new = _new_spec(
        service, spec, changes, privileged, waiting, label, number, may_view_owner, defer
    )
    now = service.clock()
    events: list[ev.Event] = []
    if new != spec:
        events.append(ev.JobModified(now, job_id if array is None else str(number), new))
    if "hold" in changes:
        events.extend(_hold_events(state, job_id, array, bool(changes["hold"]), now))
    return events


def _new_spec(
    service: Any,
    spec: JobSpec,
    changes: dict[str, Any],
    privileged: bool,
    waiting: bool,
    label: str,
    number: int,
    may_view_owner: Callable[[str], bool] | None,
    defer: bool,
) -> JobSpec:
    updates: dict[str, Any] = {}
    if "name" in changes:
        updates["name"] = str(changes["name"] or "")
    if "walltime_s" in changes:
        wall = changes["walltime_s"]
        if wall is not None and wall < 1:
            raise InvalidRequest("walltime_s must be at least 1 second")
        if not privileged and (
            wall is None or (spec.walltime_s is not None and wall > spec.walltime_s)
        ):
            raise Forbidden(
                f"users may only shorten a job's walltime ({label} has "
                f"{spec.walltime_s} s; operators and admins may lengthen it)"
            )
        updates["walltime_s"] = wall
    if "priority" in changes:
        try:
            check_job_priority(service.settings.scheduler.priority, changes["priority"], privileged)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        updates["priority"] = changes["priority"]
    if "slots" in changes:
        if changes["slots"] < 1:
            raise InvalidRequest("slots must be at least 1")
        updates["slots"] = changes["slots"]
    if "memory_mb" in changes:
        if not 0 <= changes["memory_mb"] <= MAX_MEMORY_MB:
            raise InvalidRequest(f"memory_mb must be between 0 and {MAX_MEMORY_MB}")
        updates["memory_mb"] = changes["memory_mb"]
    if "resources" in changes:
        updates["resources"] = _resources(
            str(changes["resources"] or ""), updates.get("slots", spec.slots)
        )
        reserved = _rusage_mem(updates["resources"])
        if reserved is not None and "memory_mb" not in changes:
            updates["memory_mb"] = reserved
    if "dependency" in changes:
        terms = parse_dependency(changes["dependency"] or None)
        for term in terms:
            if parse_job_id(term.job)[0] == number:
                raise InvalidRequest(f"{label} cannot depend on itself")
            service.submissions.check_dependency(term.job, may_view_owner)
        updates["dependency"] = terms
    if "hold" in changes:
        updates["hold"] = bool(changes["hold"])
    if "queue" in changes:
        name = changes["queue"]
        queue = service.state.queues.get(name)
        if queue is None:
            raise InvalidRequest(f"queue {name!r} does not exist")
        if not queue.open and name != spec.queue:
            raise Conflict(f"queue {name!r} is closed: it accepts no new jobs")
        updates["queue"] = name
    new = dataclasses.replace(spec, **updates)
    if waiting and set(changes) & {"queue", "slots", "memory_mb", "walltime_s", "resources"}:
        queue = service.state.queues[new.queue]
        groups = [g for g, members in service.settings.scheduler.groups if new.user in members]
        applied = queue_rules.apply(
            queue, new.user, groups, new.slots, new.memory_mb, new.walltime_s
        )
        new = dataclasses.replace(new, memory_mb=applied.memory_mb, walltime_s=applied.walltime_s)
        if not defer:
            requirement = parse_requirement(new.resources) if new.resources else None
            hosts = service.state.hosts.values()
            # a job that may spread is judged as a set of hosts, else as one
            why = multi_host_refusal(
                requirement,
                new.slots,
                new.memory_mb,
                new.exclusive,
                new.mem_per_slot_mb,
                queue,
                hosts,
            )
            if why == "":
                why = refusal(requirement, new.slots, new.memory_mb, queue, hosts)
            if why is not None:
                raise InvalidRequest(
                    f'{why} (xce job modify --defer, or "defer": true in the API, keeps it '
                    "for hosts that have not registered yet)"
                )
    return new


def _resources(text: str, slots: int) -> str:
    text = text.strip()
    if text:
        check_span(parse_requirement(text), slots)  # ExprError names the column
    return text


def _rusage_mem(text: str) -> int | None:
    if not text:
        return None
    reserved = next((r.value for r in parse_requirement(text).rusage if r.name == "mem"), None)
    if reserved is not None and reserved > MAX_MEMORY_MB:
        raise InvalidRequest(
            f"resources: rusage[mem={reserved:g}] is more than the limit of {MAX_MEMORY_MB} MB"
        )
    return None if reserved is None else int(reserved)


def _hold_events(state: Any, job_id: str, array: Any, hold: bool, now: float) -> list[ev.Event]:
    if array is not None:
        if hold and not array.held:
            return [ev.ArrayHeld(now, array.id)]
        if not hold and array.held:
            return [ev.ArrayReleased(now, array.id)]
        return []
    job = state.jobs[job_id]
    if hold and job.state is JobState.PEND:
        return [ev.JobSuspended(now, job_id)]
    if not hold and job.state is JobState.PSUSP:
        return [ev.JobResumed(now, job_id)]
    return []
