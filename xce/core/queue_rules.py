"""A queue's rules for the jobs submitted to it: who may submit, per-job maximums and the
defaults filled in when a job gives none (LSF's USERS, RUNLIMIT, MEMLIMIT, PROCLIMIT; Slurm's
AllowAccounts, MaxTime/DefaultTime, MaxMemPerNode/DefMemPerNode, MaxCPUsPerNode).

Checked at submit only: a queue changed later (`xce queue modify`) does not touch the jobs
already in it, as in both."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from xce.core.errors import Forbidden, InvalidRequest
from xce.core.job_context import families_problem, missing_problem
from xce.core.model import QueueRecord


@dataclass(frozen=True)
class Applied:
    memory_mb: int
    walltime_s: int | None


def may_submit(queue: QueueRecord, user: str, groups: Iterable[str]) -> bool:
    """Everyone when the queue lists no users; else the user by name or through @group."""
    if not queue.users or user in queue.users:
        return True
    return any(f"@{group}" in queue.users for group in groups)


def apply(
    queue: QueueRecord,
    user: str,
    groups: Iterable[str],
    slots: int,
    memory_mb: int,
    walltime_s: int | None,
) -> Applied:
    """The job's memory and walltime after the queue's defaults; refuses what it forbids."""
    if not may_submit(queue, user, groups):
        raise Forbidden(
            f"user {user} may not submit to queue {queue.name!r} (it takes jobs "
            f"of {', '.join(queue.users)})"
        )
    if queue.max_slots is not None and slots > queue.max_slots:
        raise InvalidRequest(
            f"the job asks for {slots} slots; queue {queue.name!r} takes at "
            f"most {queue.max_slots} per job"
        )
    if memory_mb == 0 and queue.default_memory_mb is not None:
        memory_mb = queue.default_memory_mb
    if queue.max_memory_mb is not None and memory_mb > queue.max_memory_mb:
        raise InvalidRequest(
            f"the job asks for {memory_mb} MB; queue {queue.name!r} takes at "
            f"most {queue.max_memory_mb} MB per job"
        )
    if walltime_s is None:
        # Slurm: DefaultTime, else MaxTime; LSF: the queue's RUNLIMIT applies.
        walltime_s = queue.default_walltime_s or queue.max_walltime_s
    if (
        queue.max_walltime_s is not None
        and walltime_s is not None
        and walltime_s > queue.max_walltime_s
    ):
        raise InvalidRequest(
            f"the job asks for a walltime of {walltime_s} s; queue "
            f"{queue.name!r} allows at most {queue.max_walltime_s} s"
        )
    return Applied(memory_mb, walltime_s)


def check_preempt(queue: QueueRecord, known: Collection[str]) -> str | None:
    """What is wrong with the queues `queue` preempts: itself (checked first, as a queue
    being created is not among the `known` ones yet), or a queue that does not exist."""
    if queue.name in queue.preempt:
        return f"queue {queue.name!r} cannot preempt itself"
    unknown = [name for name in queue.preempt if name not in known]
    return f"preempt: queue {unknown[0]!r} does not exist" if unknown else None


def check_settings(queue: QueueRecord) -> str | None:
    """What is inconsistent in a queue's own settings (a default above its maximum)."""
    for default, maximum, what in (
        (queue.default_walltime_s, queue.max_walltime_s, "walltime_s"),
        (queue.default_memory_mb, queue.max_memory_mb, "memory_mb"),
    ):
        if default is not None and maximum is not None and default > maximum:
            return f"default_{what} ({default}) is above max_{what} ({maximum})"
    if queue.preempt_mode not in ("suspend", "requeue"):
        return f"preempt_mode must be suspend or requeue, not {queue.preempt_mode!r}"
    if queue.name in queue.preempt:
        return f"queue {queue.name!r} cannot preempt itself"
    if queue.preempt_min_run_s < 0:
        return "preempt_min_run_s may not be negative"
    if queue.name in queue.aliases:
        return f"queue {queue.name!r} lists its own name among its aliases"
    return families_problem(queue.job_env) or missing_problem(queue.missing_submit_dir)


def alias_problem(queues: Iterable[QueueRecord]) -> str | None:
    """An alias that is another queue's name or is claimed by two queues: a submission
    naming it would not say which queue it means."""
    queues = list(queues)
    names = {q.name for q in queues}
    owner: dict[str, str] = {}
    for queue in queues:
        for alias in queue.aliases:
            if alias in names:
                return f"queue {queue.name!r}: alias {alias!r} is the name of a queue"
            if alias in owner and owner[alias] != queue.name:
                return f"alias {alias!r} is claimed by queues {owner[alias]!r} and {queue.name!r}"
            owner[alias] = queue.name
    return None
