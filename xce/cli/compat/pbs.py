"""`qsub`, `qstat`, `qdel`: PBS (PBS Pro and Torque) commands on XCE.

Why qsub translates here: the directive translator (xce/cli/directives.py) reads `#SBATCH`
and `#BSUB`, not `#PBS`, and PBS puts most requests in one `-l` list (`walltime=1:00:00,
select=1:ncpus=4:mem=4gb`). So qsub's options and the script's `#PBS` lines are read here,
by the same function, into `xce job submit` parameters; the command line wins over the
script, as with the other directives. What is covered is listed in docs/migration.md
("Familiar commands").
"""

from __future__ import annotations

import io
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from xce.cli.compat import base, formats
from xce.cli.compat.base import Failure, Parser, Usage
from xce.cli.compat.formats import ACTIVE, ALL_STATES, DOC, Column

# --- qsub ---------------------------------------------------------------------------------

_FLAGS = {"-h", "-V", "-I", "-X", "-z", "-f", "-x"}
_IGNORED = {"-m", "-M"}  # mail: XCE sends none
_PLAIN = {"-N": "name", "-d": "cwd", "-w": "cwd", "-J": "array", "-t": "array"}


def _no_host(path: str) -> str:
    """PBS paths may name a host (`host:/path`); XCE writes on the job's host."""
    head, sep, tail = path.partition(":")
    return tail if sep and "/" not in head else path


def walltime_seconds(text: str) -> int:
    """PBS walltime: `[[hours:]minutes:]seconds`."""
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or not all(p.strip().split(".")[0].isdigit() for p in parts):
        raise ValueError(f"walltime {text!r}: use [[HH:]MM:]SS")
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part.split(".")[0])
    return seconds


def pbs_megabytes(text: str) -> int:
    """PBS sizes: `4gb`, `500mb`, `1024kb`, a plain number of bytes."""
    from xce.cli.directives import megabytes

    value = text.strip()
    if value.isdigit():
        return max(1, round(int(value) / (1024 * 1024))) if int(value) else 0
    return megabytes(value[:-1] if value[-1:] in "bB" and len(value) > 1 else value)


def _resources(text: str, out: dict[str, Any]) -> None:
    """One `-l` list into `out` (submit parameters)."""
    hosts, per_host, mem_per_host = 1, None, None
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().lower()
        if not sep:
            raise Usage(f"-l {item}: use NAME=VALUE")
        if key == "walltime":
            out["walltime"] = f"{walltime_seconds(value)}s"
        elif key in ("ncpus", "ppn"):
            per_host = int(value)
        elif key in ("mem", "vmem"):
            out["memory"] = pbs_megabytes(value)
        elif key in ("nodes", "select"):
            chunks = value.split(":")
            hosts = int(chunks[0]) if chunks[0].isdigit() else 1
            for chunk in chunks[1:] if chunks[0].isdigit() else chunks:
                name, _, amount = chunk.partition("=")
                if name in ("ppn", "ncpus", "mpiprocs"):
                    per_host = int(amount)
                elif name == "mem":
                    mem_per_host = pbs_megabytes(amount)
                else:
                    raise Usage(f"-l {key}={value}: {chunk} is not covered (see {DOC})")
        elif key == "place":
            if value not in ("free", "pack", "scatter"):
                raise Usage(f"-l place={value} is not covered (see {DOC})")
        else:
            raise Usage(f"resource {key} is not covered by XCE's qsub (see {DOC})")
    if per_host is not None or hosts > 1:
        out["slots"] = hosts * (per_host or 1)
        if hosts > 1:  # spread over `hosts` hosts, `per_host` slots each
            out["resources"] = f"span[ptile={per_host or 1}]"
    if mem_per_host is not None:
        out["memory"] = mem_per_host


def _begin(text: str) -> str:
    """qsub -a `[[[[CC]YY]MM]DD]hhmm[.SS]` -> `--begin`'s local time text; `hhmm` alone is
    today's (tomorrow's once passed), as `--begin HH:MM` reads it."""
    main, _, secs = text.partition(".")
    if not main.isdigit() or len(main) not in (4, 6, 8, 10, 12) or (secs and not secs.isdigit()):
        raise Usage(f"-a {text}: use [[[[CC]YY]MM]DD]hhmm[.SS]")
    clock = f"{main[-4:-2]}:{main[-2:]}:{secs or '00'}"
    date = main[:-4]
    if not date:
        return clock
    now = time.localtime()
    day = date[-2:]
    month = date[-4:-2] or f"{now.tm_mon:02d}"
    year = date[:-4] or str(now.tm_year)
    if len(year) == 2:
        year = str(now.tm_year)[:2] + year
    return f"{year}-{month}-{day}T{clock}"


def qsub_options(options: list[list[str]]) -> tuple[dict[str, Any], bool]:
    """qsub options (each with its value) -> (submit parameters, -z given)."""
    out: dict[str, Any] = {}
    quiet = False
    for option in options:
        name, value = option[0], option[1] if len(option) > 1 else ""
        if name not in _FLAGS and len(option) < 2:
            raise Usage(f"option {name} needs a value")
        try:
            quiet = _qsub_option(name, value, out) or quiet
        except ValueError as exc:
            raise Usage(f"{name} {value}: {exc}") from None
    return out, quiet


def _qsub_option(name: str, value: str, out: dict[str, Any]) -> bool:
    """One qsub option into `out`; True for -z (print no id)."""
    if name in _PLAIN:
        out[_PLAIN[name]] = value
    elif name == "-q":
        out["queue"] = value.split("@")[0]
    elif name in ("-o", "-e"):
        out["stdout" if name == "-o" else "stderr"] = _no_host(value)
    elif name == "-l":
        _resources(value, out)
    elif name == "-h":
        out["hold"] = True
    elif name == "-V":
        out["export"] = "ALL"
    elif name == "-v":
        out["env"] = [*out.get("env", []), *_variables(value)]
    elif name == "-W":
        _attributes(value, out)
    elif name == "-a":
        out["begin"] = _begin(value)
    elif name == "-j":
        if value not in ("n", "oe", "eo"):
            raise Usage(f"-j {value}: use oe, eo or n")
        if value != "n":
            base.warn("qsub", f"-j {value}: XCE keeps stderr apart (give -e FILE)")
    elif name == "-z":
        return True
    elif name in _IGNORED:
        base.warn("qsub", f"{name}: XCE sends no mail; ignored")
    else:
        raise Usage(f"option {name} is not covered by XCE's qsub (see {DOC})")
    return False


def _variables(text: str) -> list[str]:
    """`-v A=1,B` -> ["A=1", "B=<B from this environment>"]."""
    import os

    out = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        if "=" in item:
            out.append(item)
        elif item in os.environ:
            out.append(f"{item}={os.environ[item]}")
    return out


def _attributes(text: str, out: dict[str, Any]) -> None:
    """`-W depend=afterok:12.server:13` -> the dependency; other attributes are refused."""
    key, _, value = text.partition("=")
    if key.strip() != "depend":
        raise Usage(f"-W {key.strip()} is not covered by XCE's qsub (see {DOC})")
    terms = []
    for term in value.split(","):
        kind, _, ids = term.partition(":")
        if kind not in ("afterok", "afterany", "afternotok"):
            raise Usage(f"-W depend={term}: XCE covers afterok, afterany and afternotok")
        names = [i.split(".")[0] for i in ids.split(":") if i]
        terms.append(f"{kind}:{':'.join(names)}")
    out["dependency"] = ",".join(terms)


def _takes_value(word: str) -> bool:
    return word not in _FLAGS


def pbs_lines(script: str) -> list[list[str]]:
    """The options of the `#PBS` lines of the script's leading comment block."""
    from xce.cli.compat.submit import scan

    out: list[list[str]] = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if (number == 1 and stripped.startswith("#!")) or not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#PBS") and stripped[4:5] in (" ", "\t"):
            try:
                words = shlex.split(stripped[4:])
            except ValueError as exc:
                raise Usage(f"script line {number}: {exc}") from None
            options, rest = scan(words, _takes_value)
            if rest:
                raise Usage(f"script line {number}: {stripped!r}: {rest[0]!r} is not an option")
            out += options
    return out


def qsub(args: list[str]) -> int:
    """`qsub [options] script`, `qsub [options] < script`, `qsub [options] -- CMD ARGS`;
    prints the job id."""
    from xce.cli.compat.submit import read_script, scan, submit

    options, rest = scan(args, _takes_value)
    dashdash = "--" in args[: len(args) - len(rest)]
    if any(o[0] == "--help" for o in options):
        sys.stdout.write(f"Usage: qsub [options] [script | -- command [args]]\nSee {DOC}\n")
        return 0
    script: Path | None = None
    if dashdash:
        text = None
    elif rest:
        if len(rest) > 1:
            raise Usage(
                f"arguments after the script ({' '.join(rest[1:])}) are not covered ({DOC})"
            )
        script = read_script("qsub", rest[0], need_shebang=False)
        text = script.read_text(errors="replace")
    else:
        if sys.stdin.isatty():
            raise Usage("a script file, a script on stdin, or -- COMMAND is needed")
        text = sys.stdin.read()
        sys.stdin = io.StringIO(text)  # `submitting.build` reads the script from stdin
    given, _ = qsub_options(pbs_lines(text)) if text else ({}, False)
    mine, quiet = qsub_options(options)
    merged = {**given, **mine}
    if "env" in given and "env" in mine:
        merged["env"] = [*given["env"], *mine["env"]]
    result = submit(merged, command=rest if dashdash else None, script=script)
    for warning in result.get("warnings") or ():
        base.warn("qsub", warning)
    if not quiet:
        sys.stdout.write(f"{result['job_id']}\n")
    return 0


# --- qstat --------------------------------------------------------------------------------

QSTAT_COLUMNS = [
    Column("Job id", 16),
    Column("Name", 16),
    Column("User", 16),
    Column("Time Use", 8, right=True),
    Column("S", 1),
    Column("Queue"),
]


def qstat_row(job: dict[str, Any]) -> list[str]:
    cpu = (job.get("usage") or {}).get("cpu_time_s")
    return [
        str(job["id"]),
        str(job.get("name") or ""),
        str(job["user"]),
        formats.hms(cpu) if job.get("start_time") else "0",
        formats.PBS_STATE[str(job["state"])],
        str(job["queue"]),
    ]


def qstat_full(job: dict[str, Any]) -> str:
    """`qstat -f`'s `name = value` lines."""
    usage = job.get("usage") or {}
    lines = [
        ("Job_Name", job.get("name")),
        ("Job_Owner", job.get("user")),
        ("job_state", formats.PBS_STATE[str(job["state"])]),
        ("queue", job.get("queue")),
        ("exec_host", job.get("exec_host")),
        ("Resource_List.ncpus", job.get("slots")),
        ("Resource_List.mem", f"{job['memory_mb']}mb" if job.get("memory_mb") else None),
        (
            "Resource_List.walltime",
            formats.hms(job["walltime_s"]) if job.get("walltime_s") else None,
        ),
        ("resources_used.cput", formats.hms(usage.get("cpu_time_s"))),
        ("resources_used.walltime", formats.hms(usage.get("wall_time_s"))),
        ("ctime", time.ctime(job["submit_time"]) if job.get("submit_time") else None),
        ("exit_status", job.get("exit_code")),
    ]
    body = "".join(f"    {k} = {v}\n" for k, v in lines if v is not None)
    return f"Job Id: {job['id']}\n{body}\n"


def qstat(args: list[str]) -> int:
    """`qstat [-u USERS] [-x] [-f] [JOBID|QUEUE...]`: PBS Pro's default layout."""
    p = Parser("qstat", "Jobs, as PBS's qstat shows them.")
    p.add_argument("names", nargs="*", help="job ids (12, 12[3], 12.server) or queues")
    p.add_argument("-u", dest="user", help="users (comma-separated)")
    p.add_argument("-x", dest="finished", action="store_true", help="finished jobs too")
    p.add_argument("-f", dest="full", action="store_true", help="every attribute")
    p.add_argument("-t", dest="tasks", action="store_true", help="(tasks: always one per line)")
    o = p.parse(args)
    ids: list[str] = []
    queues: list[str] = []
    for word in o.names:
        try:
            ids += formats.xce_job_ids(word)
        except ValueError:
            queues.append(word.split("@")[0])
    users = base.split_list([o.user] if o.user else None)
    states = ALL_STATES if (o.finished or ids) else ACTIVE

    def fetch(client: Any) -> list[dict[str, Any]]:
        if o.full and ids:
            return [_job(client, i) for i in ids]
        return base.list_jobs(
            client,
            states,
            user=users[0] if len(users) == 1 else None,
            queue=queues[0] if len(queues) == 1 else None,
        )

    rows = [
        j
        for j in base.call(fetch)
        if (not ids or str(j["id"]) in ids or str(j.get("array_id")) in ids)
        and (not users or j["user"] in users)
        and (not queues or j["queue"] in queues)
    ]
    if ids and not rows:
        raise Failure(f"Unknown Job Id {ids[0]}")
    if o.full:
        sys.stdout.write("".join(qstat_full(j) for j in rows))
        return 0
    if rows:
        base.write(formats.render_columns(QSTAT_COLUMNS, [qstat_row(j) for j in rows], rule=True))
    return 0


def _job(client: Any, job_id: str) -> dict[str, Any]:
    from xce.client.errors import ApiError

    try:
        job: dict[str, Any] = client.job(job_id)
    except ApiError as exc:
        if exc.status == 404:
            raise Failure(f"Unknown Job Id {job_id}") from None
        raise
    return job


# --- qdel ---------------------------------------------------------------------------------


def qdel(args: list[str]) -> int:
    """`qdel JOBID...` (12, 12.server, 12[3], 12[] for the whole array); silent on success."""
    from xce.client.errors import ApiError

    p = Parser("qdel", "Delete jobs, as PBS's qdel does.")
    p.add_argument("ids", nargs="+", help="job ids")
    p.add_argument("-W", dest="delay", help="(force: XCE kills at once)")
    o = p.parse(args)
    ids: list[str] = []
    for word in o.ids:
        try:
            ids += formats.xce_job_ids(word)
        except ValueError as exc:
            raise Usage(str(exc)) from None

    def run(client: Any) -> int:
        code = 0
        for job_id in ids:
            try:
                client.control(job_id, "kill")
            except ApiError as exc:
                if exc.status == 0:
                    raise
                if exc.status == 404:
                    sys.stderr.write(f"qdel: Unknown Job Id {job_id}\n")
                else:
                    sys.stderr.write(f"qdel: {exc.message} {job_id}\n")
                code = 1
        return code

    return base.call(run)
