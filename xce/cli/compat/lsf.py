"""`bsub`, `bjobs`, `bkill`, `bqueues`, `bhosts`: LSF's commands on XCE.

Why they are thin: XCE's own words are LSF's (job states PEND/RUN/USUSP/..., `Job <N> is
submitted to queue <q>.`), so these mostly choose LSF's defaults (bjobs shows your own
unfinished jobs) and its column layout. What each covers is listed in docs/migration.md
("Familiar commands").
"""

from __future__ import annotations

import sys
from fnmatch import fnmatchcase
from typing import Any

from xce.cli.compat import base, formats
from xce.cli.compat.base import Failure, Parser, Usage
from xce.cli.compat.formats import ACTIVE, ALL_STATES, FINISHED, Column

# --- bsub ---------------------------------------------------------------------------------

# bsub options that replace each other: one on the command line drops the script's other.
_ALIASES = {"-oo": "-o", "-eo": "-e", "-G": "-P"}


def _same(name: str) -> str:
    return _ALIASES.get(name, name)


# bsub options that take no value.
_FLAGS = {
    *("-H", "-x", "-B", "-N", "-r", "-rn", "-K", "-h", "-V", "-tty", "-XF", "-hl", "-ul"),
    *("-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX"),
}


def bsub(args: list[str]) -> int:
    """`bsub [options] command [args]` or `bsub [options] < script`; prints `Job <N> is
    submitted to queue <q>.`; -K waits for the end."""
    from xce.cli.compat.submit import scan, script_text, submit, translate, wait_for

    options, command = scan(args, lambda word: word not in _FLAGS)
    if any(o[0] in ("-h", "-V") for o in options):
        sys.stdout.write(f"Usage: bsub [options] command [arguments]\nSee {formats.DOC}\n")
        return 0
    wait = any(o[0] == "-K" for o in options)
    mine = [o for o in options if o[0] != "-K"]
    text = script_text(command or None, None)
    given = translate("bsub", "#BSUB", mine, text, _same, lambda word: word not in _FLAGS)
    result = submit(given, command=command or None, final=True)
    for text in result.get("warnings") or ():
        base.warn("bsub", text)
    sys.stdout.write(f"Job <{result['job_id']}> is submitted to queue <{result['queue']}>.\n")
    if not wait:
        return 0
    sys.stdout.write("<<Waiting for dispatch ...>>\n")
    sys.stdout.flush()
    code = wait_for(str(result["job_id"]))
    sys.stdout.write("<<Job is finished>>\n")
    return code


# --- bjobs --------------------------------------------------------------------------------

BJOBS_COLUMNS = [
    Column("JOBID", 7),
    Column("USER", 7),
    Column("STAT", 5),
    Column("QUEUE", 10),
    Column("FROM_HOST", 11),
    Column("EXEC_HOST", 11),
    Column("JOB_NAME", 10),
    Column("SUBMIT_TIME"),
]


def bjobs_row(job: dict[str, Any]) -> list[str]:
    """One bjobs line: an array's task shows the array's number and `name[index]`."""
    name = str(job.get("name") or "")
    number = job.get("array_id")
    if number is not None:
        name = f"{name}[{str(job['id']).partition('[')[2]}"
    return [
        str(number if number is not None else job["id"]),
        str(job["user"]),
        str(job["state"]),
        str(job["queue"]),
        str(job.get("submit_host") or ""),
        str(job.get("exec_host") or ""),
        name,
        formats.lsf_time(job.get("submit_time")),
    ]


def bjobs(args: list[str]) -> int:
    """`bjobs [-a|-d|-r|-p|-s] [-u USER|all] [-q QUEUE] [-m HOST] [-J NAME] [-noheader]
    [JOBID...]`: your unfinished jobs by default, as LSF."""
    p = Parser("bjobs", "Jobs, as LSF's bjobs shows them.")
    p.add_argument("ids", nargs="*", help="job ids (12, 12[3])")
    p.add_argument("-u", dest="user", help="a user, or all")
    p.add_argument("-q", dest="queue", help="a queue")
    p.add_argument("-m", dest="host", help="a host")
    p.add_argument("-J", dest="name", help="a job name (wildcards * allowed)")
    p.add_argument("-a", dest="all", action="store_true", help="finished jobs too")
    p.add_argument("-d", dest="done", action="store_true", help="finished jobs only")
    p.add_argument("-r", dest="run", action="store_true", help="running jobs")
    p.add_argument("-p", dest="pend", action="store_true", help="pending jobs")
    p.add_argument("-s", dest="susp", action="store_true", help="suspended jobs")
    p.add_argument("-w", dest="wide", action="store_true", help="(never cut: always so)")
    p.add_argument("-noheader", action="store_true", help="no header line")
    o = p.parse(args)
    states: set[str] = set()
    if o.run:
        states.add("RUN")
    if o.pend:
        states.update(("PEND", "PSUSP"))
    if o.susp:
        states.update(("PSUSP", "USUSP", "SSUSP"))
    if o.done:
        states.update(FINISHED)
    if not states:
        states = set(ALL_STATES if o.all or o.ids else ACTIVE)
    ids = _ids(o.ids)

    def fetch(client: Any) -> list[dict[str, Any]]:
        user = o.user if o.user and o.user != "all" else None
        if user is None and o.user != "all" and not ids:
            user = base.me(client)
        return base.list_jobs(client, states, user=user, queue=o.queue, host=o.host)

    rows = [
        j
        for j in base.call(fetch)
        if (not ids or str(j["id"]) in ids or str(j.get("array_id")) in ids)
        and (not o.name or fnmatchcase(str(j.get("name") or ""), o.name))
    ]
    if not rows:
        if ids:
            for job_id in ids:
                sys.stderr.write(f"Job <{job_id}> is not found\n")
            return 255
        sys.stderr.write("No job found\n" if o.all or o.done else "No unfinished job found\n")
        return 0
    base.write(formats.render_columns(BJOBS_COLUMNS, [bjobs_row(j) for j in rows], not o.noheader))
    return 0


def _ids(words: list[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        try:
            out += formats.xce_job_ids(word)
        except ValueError as exc:
            raise Usage(str(exc)) from None
    return out


# --- bkill --------------------------------------------------------------------------------


def bkill(args: list[str]) -> int:
    """`bkill JOBID...`, `bkill -u USER|all 0`, `bkill -q QUEUE 0`, `bkill -J NAME 0`:
    prints `Job <N> is being terminated` for each."""
    from xce.client.errors import ApiError

    p = Parser("bkill", "Kill jobs, as LSF's bkill does.")
    p.add_argument("ids", nargs="*", help="job ids (12, 12[3]); 0: every job selected")
    p.add_argument("-u", dest="user", help="a user, or all")
    p.add_argument("-q", dest="queue", help="a queue")
    p.add_argument("-m", dest="host", help="a host")
    p.add_argument("-J", dest="name", help="a job name (wildcards * allowed)")
    o = p.parse(args)
    every = "0" in o.ids
    ids = _ids([i for i in o.ids if i != "0"])
    if not ids and not (every or o.user or o.queue or o.host or o.name):
        raise Usage("a job id is needed (0 for every job of the user, queue or name)")

    def run(client: Any) -> int:
        targets = ids
        if every or (not ids and (o.user or o.queue or o.host or o.name)):
            user = o.user if o.user and o.user != "all" else None
            if user is None and o.user != "all":
                user = base.me(client)
            rows = base.list_jobs(client, ACTIVE, user=user, queue=o.queue, host=o.host)
            rows = [r for r in rows if not o.name or fnmatchcase(str(r.get("name") or ""), o.name)]
            if not rows:
                raise Failure("No unfinished job found")
            targets = list(dict.fromkeys(str(r.get("array_id") or r["id"]) for r in rows))
        code = 0
        for job_id in targets:
            try:
                client.control(job_id, "kill")
            except ApiError as exc:
                if exc.status == 0:
                    raise
                sys.stderr.write(f"Job <{job_id}>: {exc.message}\n")
                code = 255
                continue
            sys.stdout.write(f"Job <{job_id}> is being terminated\n")
        return code

    return base.call(run)


# --- bqueues, bhosts ----------------------------------------------------------------------

BQUEUES_COLUMNS = [
    Column("QUEUE_NAME", 15),
    Column("PRIO", 4, right=True),
    Column("STATUS", 15),
    Column("MAX", 4, right=True),
    Column("JL/U", 4, right=True),
    Column("JL/P", 4, right=True),
    Column("JL/H", 4, right=True),
    Column("NJOBS", 5, right=True),
    Column("PEND", 5, right=True),
    Column("RUN", 5, right=True),
    Column("SUSP", 5, right=True),
]


def bqueues_row(queue: dict[str, Any]) -> list[str]:
    pend, run, susp = (int(queue.get(k) or 0) for k in ("pending", "running", "suspended"))
    return [
        str(queue["name"]),
        str(queue.get("priority", 0)),
        str(queue.get("status") or ""),
        str(queue.get("max_running") or "-"),
        str(queue.get("max_running_per_user") or "-"),
        "-",
        "-",
        str(pend + run + susp),
        str(pend),
        str(run),
        str(susp),
    ]


def bqueues(args: list[str]) -> int:
    """`bqueues [-noheader] [QUEUE...]`."""
    p = Parser("bqueues", "Queues, as LSF's bqueues shows them.")
    p.add_argument("names", nargs="*", help="queues")
    p.add_argument("-w", dest="wide", action="store_true", help="(never cut: always so)")
    p.add_argument("-noheader", action="store_true", help="no header line")
    o = p.parse(args)
    queues = base.call(lambda c: c.queues())
    if o.names:
        missing = [n for n in o.names if n not in {q["name"] for q in queues}]
        if missing:
            raise Failure(f"{missing[0]}: No such queue")
        queues = [q for q in queues if q["name"] in o.names]
    rows = [bqueues_row(q) for q in queues]
    base.write(formats.render_columns(BQUEUES_COLUMNS, rows, not o.noheader))
    return 0


BHOSTS_COLUMNS = [
    Column("HOST_NAME", 19),
    Column("STATUS", 15),
    Column("JL/U", 4, right=True),
    Column("MAX", 5, right=True),
    Column("NJOBS", 5, right=True),
    Column("RUN", 5, right=True),
    Column("SSUSP", 5, right=True),
    Column("USUSP", 5, right=True),
    Column("RSV", 5, right=True),
]


def bhosts_row(host: dict[str, Any], slots: dict[str, dict[str, int]]) -> list[str]:
    """`slots`: per host, the slots of its jobs by state (RUN, SSUSP, USUSP)."""
    mine = slots.get(host["name"], {})
    run, ssusp, ususp = (mine.get(s, 0) for s in ("RUN", "SSUSP", "USUSP"))
    return [
        str(host["name"]),
        formats.lsf_host_status(host),
        "-",
        str(host.get("slots") or 0),
        str(run + ssusp + ususp),
        str(run),
        str(ssusp),
        str(ususp),
        "0",
    ]


def slots_by_host(jobs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for job in jobs:
        for part in job.get("hosts") or []:
            per = out.setdefault(str(part["host"]), {})
            per[job["state"]] = per.get(job["state"], 0) + int(part.get("slots") or 0)
    return out


def bhosts(args: list[str]) -> int:
    """`bhosts [-noheader] [HOST...]`."""
    p = Parser("bhosts", "Hosts, as LSF's bhosts shows them.")
    p.add_argument("names", nargs="*", help="hosts")
    p.add_argument("-w", dest="wide", action="store_true", help="(never cut: always so)")
    p.add_argument("-noheader", action="store_true", help="no header line")
    o = p.parse(args)
    hosts, jobs = base.call(lambda c: (c.hosts(), base.list_jobs(c, ("RUN", "SSUSP", "USUSP"))))
    if o.names:
        missing = [n for n in o.names if n not in {h["name"] for h in hosts}]
        if missing:
            raise Failure(f"{missing[0]}: No such host")
        hosts = [h for h in hosts if h["name"] in o.names]
    slots = slots_by_host(jobs)
    base.write(
        formats.render_columns(
            BHOSTS_COLUMNS, [bhosts_row(h, slots) for h in hosts], not o.noheader
        )
    )
    return 0
