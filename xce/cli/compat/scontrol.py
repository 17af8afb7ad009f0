"""`scontrol`: show a job, node or partition in Slurm's `Key=Value` records; hold, release,
suspend, resume and requeue jobs.

Why hold and release look first: XCE's `stop` holds a pending job but suspends a running
one, while Slurm's hold applies only to jobs that wait, so each job is read before it is
touched. What is covered is listed in docs/migration.md ("Familiar commands").
"""

from __future__ import annotations

import sys
from typing import Any

from xce.cli.compat import base, formats
from xce.cli.compat.base import Failure, Usage
from xce.cli.compat.formats import DOC
from xce.core import hostlist


def _pairs(lines: list[list[tuple[str, Any]]]) -> str:
    """scontrol's record: `Key=Value` pairs, the first line flush, the others indented."""
    out = []
    for n, pairs in enumerate(lines):
        text = " ".join(f"{k}={'(null)' if v in (None, '') else v}" for k, v in pairs)
        out.append(("   " if n else "") + text)
    return "\n".join(out) + "\n\n"


def show_job(job: dict[str, Any]) -> str:
    """`scontrol show job`'s record of an XCE job, task or array."""
    state = str(job["state"])
    long = formats.slurm_state(state, job.get("reason"))[1]
    pending = state in ("PEND", "PSUSP")
    hosts = formats.host_names(job)
    usage = job.get("usage") or {}
    first: list[tuple[str, Any]] = [("JobId", formats.slurm_job_id(str(job["id"])))]
    if job.get("array_id") is not None:
        first += [("ArrayJobId", job["array_id"]), ("ArrayTaskId", job.get("array_index"))]
    if job.get("kind") == "array":
        first += [("ArrayJobId", job["id"]), ("ArrayTaskId", job["array"]["spec"])]
    first.append(("JobName", job.get("name")))
    code = formats.slurm_exit_code(job) if state in ("DONE", "EXIT") else "0:0"
    return _pairs(
        [
            first,
            [("UserId", job.get("user")), ("Account", job.get("account"))],
            [
                ("Priority", job.get("priority")),
                ("JobState", long),
                ("Reason", formats.slurm_reason(state, job.get("reason")) if pending else "None"),
                ("Dependency", job.get("dependency")),
            ],
            [("ExitCode", code)],
            [
                ("RunTime", formats.slurm_duration(usage.get("wall_time_s"))),
                ("TimeLimit", formats.slurm_limit(job.get("walltime_s"))),
            ],
            [
                ("SubmitTime", formats.slurm_timestamp(job.get("submit_time"))),
                ("EligibleTime", formats.slurm_timestamp(job.get("eligible_time"))),
            ],
            [
                ("StartTime", formats.slurm_timestamp(job.get("start_time"))),
                ("EndTime", formats.slurm_timestamp(job.get("end_time"))),
            ],
            [("Partition", job.get("queue"))],
            [("NodeList", hostlist.compress(hosts)), ("BatchHost", hosts[0] if hosts else None)],
            [
                ("NumNodes", max(1, len(hosts))),
                ("NumCPUs", job.get("slots")),
                ("NumTasks", job.get("slots")),
            ],
            [("MinMemoryNode", f"{job.get('memory_mb') or 0}M")],
            [("Command", job.get("command") or ("(script)" if job.get("script") else None))],
            [("WorkDir", job.get("cwd") or job.get("submit_dir"))],
            [("StdErr", job.get("stderr_file")), ("StdOut", job.get("stdout_file"))],
        ]
    )


def show_node(host: dict[str, Any], queues: list[dict[str, Any]]) -> str:
    parts = [q["name"] for q in queues if host in formats.queue_hosts(q, [host])]
    state = formats.SINFO_LONG_STATE[formats.sinfo_node_state(host)].upper()
    load = (host.get("load") or {}).get("load1")
    return _pairs(
        [
            [("NodeName", host["name"])],
            [
                ("CPUAlloc", host.get("slots_used")),
                ("CPUTot", host.get("slots")),
                ("CPULoad", f"{load:.2f}" if load is not None else None),
            ],
            [("RealMemory", host.get("memory_mb")), ("AllocMem", host.get("memory_used_mb"))],
            [("State", state), ("Partitions", ",".join(parts))],
            [("Reason", host.get("admin_reason"))],
        ]
    )


def show_partition(queue: dict[str, Any], hosts: list[dict[str, Any]]) -> str:
    members = formats.queue_hosts(queue, hosts)
    return _pairs(
        [
            [("PartitionName", queue["name"])],
            [
                ("State", formats.sinfo_avail(queue).upper()),
                ("TotalCPUs", sum(int(h.get("slots") or 0) for h in members)),
                ("TotalNodes", len(members)),
            ],
            [("Nodes", hostlist.compress(h["name"] for h in members))],
            [
                ("MaxTime", formats.slurm_limit(queue.get("max_walltime_s"))),
                ("DefaultTime", formats.slurm_limit(queue.get("default_walltime_s"), "NONE")),
            ],
            [("PriorityTier", queue.get("priority"))],
            [
                ("MaxCPUsPerJob", queue.get("max_slots") or "UNLIMITED"),
                ("MaxMemPerNode", queue.get("max_memory_mb") or "UNLIMITED"),
            ],
        ]
    )


_ACTIONS = {"hold": "stop", "release": "resume", "suspend": "stop", "resume": "resume"}


def scontrol(args: list[str]) -> int:
    """`scontrol show job|node|partition [NAME]`; `scontrol hold|release JOBID...` (and
    suspend, resume, requeue)."""
    words = [a for a in args if a not in ("-o", "--oneliner")]
    if not words or words[0] in ("-h", "--help", "help"):
        sys.stdout.write(
            "Usage: scontrol show job|node|partition [NAME]\n"
            "       scontrol hold|release|suspend|resume|requeue JOBID...\n"
            f"What XCE covers and what not: {DOC}\n"
        )
        return 0
    if words[0].startswith("-"):
        raise Usage(f"option {words[0]} is not covered by XCE's scontrol (see {DOC})")
    command, rest = words[0].lower(), words[1:]
    if command == "show":
        text = _show(rest)
        if "-o" in args or "--oneliner" in args:
            text = "".join(" ".join(r.split()) + "\n" for r in text.split("\n\n") if r.strip())
        sys.stdout.write(text)
        return 0
    if command in (*_ACTIONS, "requeue"):
        return _control(command, rest)
    raise Usage(f"scontrol {command} is not covered by XCE (see {DOC})")


def _show(rest: list[str]) -> str:
    if not rest:
        raise Usage("show what? job, node or partition")
    what = rest[0].lower().rstrip("s")
    name = rest[1] if len(rest) > 1 else None
    if what == "job":
        if name is None:
            rows = base.call(lambda c: base.list_jobs(c, None))
            return "".join(show_job(j) for j in rows) or "No jobs in the system\n"
        try:
            [job_id] = formats.xce_job_ids(name)[:1]
        except ValueError as exc:
            raise Usage(str(exc)) from None
        return show_job(base.call(lambda c: _job(c, job_id)))
    if what in ("node", "partition"):
        queues, hosts = base.call(lambda c: (c.queues(), c.hosts()))
        if what == "node":
            chosen = [h for h in hosts if name is None or h["name"] == name]
            if not chosen:
                raise Failure(f"Node {name} not found")
            return "".join(show_node(h, queues) for h in chosen)
        picked = [q for q in queues if name is None or q["name"] == name]
        if not picked:
            raise Failure(f"Partition {name} not found")
        return "".join(show_partition(q, hosts) for q in picked)
    raise Usage(f"scontrol show {rest[0]} is not covered by XCE (see {DOC})")


def _job(client: Any, job_id: str) -> dict[str, Any]:
    from xce.client.errors import ApiError

    try:
        job: dict[str, Any] = client.job(job_id)
    except ApiError as exc:
        if exc.status == 404:
            raise Failure("Invalid job id specified") from None
        raise
    return job


def _control(command: str, words: list[str]) -> int:
    """hold/release/suspend/resume/requeue each job; hold and release touch only jobs
    that wait (XCE's `stop` would suspend a running one)."""
    from xce.client.errors import ApiError

    ids = []
    for word in words:
        word = word.split("=", 1)[1] if word.lower().startswith("jobid=") else word
        try:
            ids += formats.xce_job_ids(word)
        except ValueError as exc:
            raise Usage(str(exc)) from None
    if not ids:
        raise Usage(f"scontrol {command} needs a job id")

    def run(client: Any) -> int:
        code = 0
        for job_id in ids:
            try:
                if command not in ("hold", "release") or _waits(client, job_id, command):
                    client.control(job_id, _ACTIONS.get(command, command))
            except (ApiError, Failure) as exc:
                if isinstance(exc, ApiError) and exc.status == 0:
                    raise
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                sys.stderr.write(
                    f"scontrol: error: {command} job {formats.slurm_job_id(job_id)}: {message}\n"
                )
                code = 1
        return code

    return base.call(run)


def _waits(client: Any, job_id: str, command: str) -> bool:
    """Whether `command` (hold or release) has something to do for this job; a job it
    does not apply to is a `Failure` in scontrol's words."""
    job = _job(client, job_id)
    if job.get("kind") == "array":
        counts = job["array"]["counts"]
        started = counts.get("RUN", 0) + counts.get("SSUSP", 0) + counts.get("USUSP", 0)
        if started:
            raise Failure(
                "the array has started tasks; XCE holds and releases a whole array "
                "(use xce job stop/resume)"
            )
        if command == "release" and not job["array"]["held"]:
            raise Failure("Job is not held")
        return not (command == "hold" and job["array"]["held"])
    if command == "hold":
        if job["state"] not in ("PEND", "PSUSP"):
            raise Failure("Job is no longer pending execution")
        return job["state"] == "PEND"
    if job["state"] != "PSUSP":
        raise Failure("Job is not held")
    return True
