"""What a job sees of the scheduler it was written for: the variable families and the
submit-directory policy, resolved from a queue's settings and the controller's.

Why: scripts migrated from Slurm, LSF or PBS read `$SLURM_ARRAY_TASK_ID`, `$LSB_JOBINDEX`,
`$PBS_O_WORKDIR`...; without them an array silently runs the same task N times. A site that
does not want a family (one whose jobs set such names themselves) turns it off per queue
or for the whole cluster. Pure: the controller resolves, the worker sets
(xce/worker/attempt/jobenv.py).
"""

from __future__ import annotations

from xce.core.model import QueueRecord

FAMILIES = ("slurm", "lsf", "pbs")
MISSING_SUBMIT_DIR = ("fail", "job_dir")


def parse_families(text: str) -> tuple[str, ...]:
    """`"slurm, lsf"` -> ("slurm", "lsf"); "" or "none" -> (). ValueError names an unknown one."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return ()
    for name in names:
        if name not in FAMILIES:
            raise ValueError(
                f"unknown variable family {name!r} (choose from {', '.join(FAMILIES)} or none)"
            )
    return tuple(dict.fromkeys(names))


def families_problem(text: str | None) -> str | None:
    """What is wrong with a queue's `job_env` text, or None."""
    if text is None:
        return None
    try:
        parse_families(text)
    except ValueError as exc:
        return f"job_env: {exc}"
    return None


def missing_problem(policy: str, allow_empty: bool = True) -> str | None:
    """What is wrong with a `missing_submit_dir` value, or None."""
    if (allow_empty and policy == "") or policy in MISSING_SUBMIT_DIR:
        return None
    return f"missing_submit_dir must be {' or '.join(MISSING_SUBMIT_DIR)}, not {policy!r}"


def job_families(queue: QueueRecord | None, site: tuple[str, ...]) -> tuple[str, ...]:
    """The families a job of `queue` gets: the queue's own setting, else the site's."""
    if queue is None or queue.job_env is None:
        return site
    return parse_families(queue.job_env)


def missing_policy(queue: QueueRecord | None, site: str) -> str:
    """What happens when the submit directory is missing on the execution host."""
    if queue is not None and queue.missing_submit_dir:
        return queue.missing_submit_dir
    return site


def queue_for(name: str, queues: dict[str, QueueRecord]) -> QueueRecord | None:
    """The queue called `name` or, failing that, the one that lists `name` among its
    aliases (a Slurm partition or QOS name the site mapped)."""
    found = queues.get(name)
    if found is not None:
        return found
    for queue in queues.values():
        if name in queue.aliases:
            return queue
    return None
