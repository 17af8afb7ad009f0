"""`sbatch`, `squeue`, `scancel`: Slurm's job commands on XCE (sacct, sinfo and scontrol
are in slurm_info.py).

Why these options: they are what job scripts and pipelines use (`sbatch --parsable`,
`squeue -h -u $USER -o %i`, `scancel -u $USER`); each is listed, with what is not covered,
in docs/migration.md ("Familiar commands"). The output follows Slurm's default formats,
widths and truncation included, so column-cutting scripts read it unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from xce.cli.compat import base, formats
from xce.cli.compat.base import Failure, Parser, Usage
from xce.cli.compat.formats import ACTIVE, ALL_STATES, DOC
from xce.core import hostlist

# --- sbatch -------------------------------------------------------------------------------

# sbatch options that take no value (the others take the next word unless written `--x=v`;
# those that take one only after `=` are here too).
_FLAGS = {
    *("-H", "--hold", "--exclusive", "--requeue", "--no-requeue", "--parsable"),
    *("-h", "--help", "--usage", "-Q", "--quiet", "-W", "--wait", "-v", "--verbose"),
    *("-V", "--version", "--test-only", "-O", "--overcommit", "-s", "--oversubscribe"),
    *("--contiguous", "-k", "--no-kill", "--get-user-env", "--propagate", "--nice"),
    *("--spread-job", "--use-min-nodes", "--reboot", "--ignore-pbs"),
}


def _takes_value(word: str) -> bool:
    if word.startswith("--"):
        return "=" not in word and word not in _FLAGS
    return len(word) == 2 and word not in _FLAGS


# Options that replace each other: one on the command line drops the script's others.
_SAME = {"--mem-per-cpu": "--mem", "--mem-per-gpu": "--mem"}


def _long_name(word: str) -> str:
    """`-n4`, `-n`, `--ntasks=4` -> `--ntasks`: an option whatever its spelling."""
    from xce.cli.directives.slurm import SHORT

    name = word.partition("=")[0]
    if not name.startswith("--"):
        name = SHORT.get(name[:2], name[:2])
    return _SAME.get(name, name)


def sbatch(args: list[str]) -> int:
    """`sbatch [options] script`, `sbatch [options] < script`, `sbatch --wrap CMD`; prints
    `Submitted batch job N` (`N` with --parsable; nothing with -Q); -W waits for the end."""
    from xce.cli.compat.submit import (
        read_script,
        scan,
        script_text,
        submit,
        translate,
        wait_for,
    )

    options, rest = scan(args, _takes_value)
    wrap, parsable, quiet, wait, directives = None, False, False, False, []
    for option in options:
        name, _, value = option[0].partition("=")
        if name in ("-h", "--help", "--usage"):
            sys.stdout.write(
                f"Usage: sbatch [OPTIONS] script [args...]\nWhat XCE covers and what not: {DOC}\n"
            )
            return 0
        if name == "--wrap":
            wrap = value or (option[1] if len(option) > 1 else "")
        elif name == "--parsable":
            parsable = True
        elif name in ("-Q", "--quiet"):
            quiet = True
        elif name in ("-W", "--wait"):
            wait = True
        else:
            directives.append(option)
    script: Path | None = None
    if wrap is not None and rest:
        raise Usage("--wrap and a script file are mutually exclusive")
    if rest:
        if len(rest) > 1:
            raise Usage(
                f"arguments after the script ({' '.join(rest[1:])}) are not covered ({DOC})"
            )
        script = read_script("sbatch", rest[0], need_shebang=True)
    text = None if wrap is not None else script_text(None, script)
    given = translate("sbatch", "#SBATCH", directives, text, _long_name, _takes_value)
    command = [wrap] if wrap is not None else None
    result = submit(given, command=command, script=script, final=True)
    job = str(result["job_id"])
    if not quiet:
        for text in result.get("warnings") or ():
            base.warn("sbatch", text)
        sys.stdout.write(f"{job}\n" if parsable else f"Submitted batch job {job}\n")
        sys.stdout.flush()
    return wait_for(job) if wait else 0


# --- squeue -------------------------------------------------------------------------------

SQUEUE_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
SQUEUE_HEADERS = {
    "i": "JOBID",
    "A": "JOBID",
    "F": "ARRAY_JOB_ID",
    "K": "ARRAY_TASK_ID",
    "j": "NAME",
    "P": "PARTITION",
    "u": "USER",
    "t": "ST",
    "T": "STATE",
    "M": "TIME",
    "l": "TIME_LIMIT",
    "D": "NODES",
    "C": "CPUS",
    "m": "MIN_MEMORY",
    "R": "NODELIST(REASON)",
    "r": "REASON",
    "N": "NODELIST",
    "V": "SUBMIT_TIME",
    "S": "START_TIME",
}


def squeue_fields(job: dict[str, Any]) -> dict[str, str]:
    """One job's value for each squeue `%` letter."""
    state = str(job["state"])
    short, long = formats.slurm_state(state, job.get("reason"))
    hosts = formats.host_names(job)
    array = job.get("array_id")
    pending = state in ("PEND", "PSUSP")
    reason = formats.slurm_reason(state, job.get("reason")) if pending else "None"
    memory = int(job.get("memory_mb") or 0)
    index = job.get("array_index")
    if index is None and job.get("kind") == "array_pending":
        index = str(job["id"]).partition("[")[2][:-1]
    return {
        "i": formats.slurm_job_id(str(job["id"])),
        "A": str(array or job["id"]),
        "F": str(array or job["id"]),
        "K": "N/A" if index is None else str(index),
        "j": str(job.get("name") or ""),
        "P": str(job["queue"]),
        "u": str(job["user"]),
        "t": short,
        "T": long,
        "M": formats.slurm_duration((job.get("usage") or {}).get("wall_time_s")),
        "l": formats.slurm_limit(job.get("walltime_s")),
        "D": str(max(1, len(hosts))),
        "C": str(job.get("slots") or 1),
        "m": f"{memory}M" if memory else "0",
        "R": f"({reason})" if pending else hostlist.compress(hosts),
        "r": reason,
        "N": hostlist.compress(hosts),
        "V": formats.slurm_timestamp(job.get("submit_time")),
        "S": formats.slurm_timestamp(job.get("start_time"), "N/A"),
    }


def squeue(args: list[str]) -> int:
    """`squeue [-u USER] [-j IDS] [-p PART] [-t STATES] [-h] [-o FORMAT]`."""
    p = Parser("squeue", "Jobs in the cluster, as Slurm's squeue shows them.")
    p.add_argument("-u", "--user", action="append", help="users (comma-separated)")
    p.add_argument("--me", action="store_true", help="your own jobs")
    p.add_argument("-j", "--jobs", action="append", help="job ids (12, 12_3, 12[3])")
    p.add_argument("-p", "--partition", action="append", help="queues (comma-separated)")
    p.add_argument("-t", "--states", help="PD,R,S,CD,F,CA,TO,... or all")
    p.add_argument("-w", "--nodelist", action="append", help="hosts (comma-separated)")
    p.add_argument("-n", "--name", action="append", help="job names (comma-separated)")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("-o", "--format", help="%%-fields, e.g. '%%.18i %%.8u %%t'")
    p.add_argument("-a", "--all", action="store_true", help="(every queue: always so)")
    p.add_argument("-r", "--array", action="store_true", help="(tasks: always one per line)")
    o = p.parse(args)
    try:
        fields = formats.parse_format(o.format or SQUEUE_FORMAT, SQUEUE_HEADERS)
    except ValueError as exc:
        raise Usage(f"--format: {exc} (see {DOC})") from None
    wanted: set[str] | None = set(ACTIVE)
    letters: set[str] | None = None
    if o.jobs and not o.states:
        wanted = None
    if o.states:
        try:
            chosen = formats.slurm_state_filter(o.states)
        except ValueError as exc:
            raise Usage(str(exc)) from None
        wanted, letters = chosen if chosen is not None else (None, None)
    ids = _wanted_ids(o.jobs)

    def fetch(client: Any) -> list[dict[str, Any]]:
        users = base.split_list(o.user) + ([base.me(client)] if o.me else [])
        return _select(client, wanted, users, base.split_list(o.partition), o.nodelist)

    rows = []
    names = set(base.split_list(o.name))
    for job in base.call(fetch):
        if ids is not None and not _matches(job, ids):
            continue
        if names and job.get("name") not in names:
            continue
        values = squeue_fields(job)
        if letters is not None and values["t"] not in letters:
            continue
        rows.append(values)
    if ids is not None and not rows and not o.states:
        raise Failure("Invalid job id specified")
    base.write(formats.render_format(fields, SQUEUE_HEADERS, rows, header=not o.noheader))
    return 0


def _wanted_ids(values: list[str] | None) -> set[str] | None:
    if not values:
        return None
    out: set[str] = set()
    for word in base.split_list(values):
        try:
            out.update(formats.xce_job_ids(word))
        except ValueError as exc:
            raise Usage(str(exc)) from None
    return out


def _matches(job: dict[str, Any], ids: set[str]) -> bool:
    """A row is selected by its own id or by its array's number."""
    return str(job["id"]) in ids or str(job.get("array_id")) in ids


def _select(
    client: Any,
    states: set[str] | None,
    users: list[str],
    queues: list[str],
    hosts: list[str] | None,
) -> list[dict[str, Any]]:
    """The job rows in `states` (None: all) of these users, queues and hosts: one value of
    each is filtered by the controller, several here."""
    filters = {
        "user": users[0] if len(users) == 1 else None,
        "queue": queues[0] if len(queues) == 1 else None,
    }
    host_list = base.split_list(hosts)
    if len(host_list) == 1:
        filters["host"] = host_list[0]
    rows = base.list_jobs(client, states if states is not None else ALL_STATES, **filters)
    return [
        j
        for j in rows
        if (not users or j["user"] in users)
        and (not queues or j["queue"] in queues)
        and (not host_list or set(formats.host_names(j)) & set(host_list))
    ]


# --- scancel ------------------------------------------------------------------------------


def scancel(args: list[str]) -> int:
    """`scancel IDS...` or `scancel -u USER [-n NAME] [-p PART] [-t STATE]`; silent on
    success, as scancel is."""
    p = Parser("scancel", "Cancel jobs, as Slurm's scancel does.")
    p.add_argument("ids", nargs="*", help="job ids: 12, 12_3, 12_[1-3], 12[3]")
    p.add_argument("-u", "--user", action="append", help="this user's jobs")
    p.add_argument("--me", action="store_true", help="your own jobs")
    p.add_argument("-n", "--name", "--jobname", action="append", help="jobs of this name")
    p.add_argument("-p", "--partition", action="append", help="jobs in this queue")
    p.add_argument("-t", "--state", help="jobs in these states (PD, R, S)")
    p.add_argument("-w", "--nodelist", action="append", help="jobs on these hosts")
    p.add_argument("-v", "--verbose", action="store_true", help="say what is cancelled")
    o = p.parse(args)
    ids: list[str] = []
    for word in o.ids:
        try:
            ids += formats.xce_job_ids(word)
        except ValueError as exc:
            raise Usage(str(exc)) from None
    filtered = bool(o.user or o.me or o.name or o.partition or o.state or o.nodelist)
    if not ids and not filtered:
        raise Usage("No job identification provided")
    states: set[str] = set(ACTIVE)
    if o.state:
        try:
            chosen = formats.slurm_state_filter(o.state)
        except ValueError as exc:
            raise Usage(str(exc)) from None
        states = set(ACTIVE) & (chosen[0] if chosen is not None else set(ACTIVE))

    def run(client: Any) -> int:
        targets = ids
        if filtered:
            users = base.split_list(o.user) + ([base.me(client)] if o.me else [])
            rows = _select(client, states, users, base.split_list(o.partition), o.nodelist)
            names = set(base.split_list(o.name))
            rows = [r for r in rows if not names or r.get("name") in names]
            targets = _cancel_targets(rows, bool(o.state))
            if ids:
                chosen_ids = set(ids)
                targets = [t for t in targets if t in chosen_ids or t.split("[")[0] in chosen_ids]
        return _kill_each(client, targets, o.verbose)

    return base.call(run)


def _cancel_targets(rows: list[dict[str, Any]], by_state: bool) -> list[str]:
    """The ids to kill for the selected rows: an array's unstarted tasks go only with
    the whole array (XCE cancels them together), so with a state filter they are left."""
    whole = [] if by_state else [str(r["array_id"]) for r in rows if r["kind"] == "array_pending"]
    out = list(dict.fromkeys(whole))
    for r in rows:
        if r["kind"] == "array_pending":
            if by_state:
                base.warn(
                    "scancel",
                    f"the unstarted tasks of array {r['array_id']} are cancelled only with the "
                    f"whole array (scancel {r['array_id']})",
                )
            continue
        if r.get("array_id") is not None and str(r["array_id"]) in whole:
            continue
        out.append(str(r["id"]))
    return out


def _kill_each(client: Any, targets: list[str], verbose: bool) -> int:
    """Kill each id; an id that fails is reported, as scancel does, and the rest go on."""
    from xce.client.errors import ApiError

    code = 0
    for job_id in targets:
        try:
            client.control(job_id, "kill")
        except ApiError as exc:
            if exc.status == 0:
                raise
            sys.stderr.write(
                f"scancel: error: Kill job error on job id {formats.slurm_job_id(job_id)}: "
                f"{exc.message}\n"
            )
            code = 1
            continue
        if verbose:
            sys.stderr.write(f"scancel: Terminating job {formats.slurm_job_id(job_id)}\n")
    return code
