"""`#BSUB` lines: bsub's options as `xce job submit` options.

As for `#SBATCH` (xce/cli/directives/slurm.py): a handler per option XCE honours, a reason
for each option that is only a warning (`IGNORED`) or refused (`REFUSED`), and any other
option refused naming the line (a warning with `--lenient`). `-M` and `rusage[mem=...]`
without a unit are MB: LSF's own default unit is KB, but sites set LSF_UNIT_FOR_LIMITS=MB
(or larger) almost everywhere, and scripts are written for that.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from xce.cli.directives.model import Unsupported
from xce.cli.directives.request import GpuUnit, Request
from xce.cli.directives.resources import add_lsf, host_names, hosts_select
from xce.cli.directives.units import lsf_begin, megabytes, whole

FLAGS = {
    "-H",
    "-x",
    "-B",
    "-N",
    "-r",
    "-rn",
    "-K",
    "-I",
    "-Ip",
    "-Is",
    "-IS",
    "-ISp",
    "-ISs",
    "-IX",
    "-tty",
    "-XF",
    "-hl",
    "-ul",
    "-ti",
}

_MAIL = "XCE sends no mail"
_LIMITS = "XCE sets no per-process limit (ulimit) for the job"
_REQUEUE = "requeueing after a host failure is the queue's on_host_failure policy"
IGNORED = {
    "-u": _MAIL,
    "-B": _MAIL,
    "-N": _MAIL,
    "-L": "XCE runs the script as it is (its #! line) and starts no login shell",
    "-app": "XCE has no application profiles",
    "-outdir": "XCE creates no output directory: make it in the script or use one that exists",
    "-Jd": "XCE records no job description",
    "-sla": "XCE has no service classes",
    "-ti": "a job whose dependency can never hold stays pending (xce job show tells why)",
    "-E": "XCE runs no pre-execution command: run it at the start of the script",
    "-Ep": "XCE runs no post-execution command: run it at the end of the script",
    "-r": _REQUEUE,
    "-rn": _REQUEUE,
    "-K": "xce job submit returns at once: use xce job wait ID",
    "-We": "XCE does not use estimated run times",
    "-c": "XCE limits wall-clock time (-W), not CPU time",
    **dict.fromkeys(("-C", "-D", "-F", "-S", "-T", "-v", "-p", "-hl", "-ul"), _LIMITS),
    "-sp": "a script cannot set the priority: use xce job submit --priority",
    "-alloc_flags": "XCE has no allocation flags",
    "-Lp": "XCE has no license projects",
    "-a": "XCE runs no esub",
    "-k": "XCE does not checkpoint jobs",
    "-wa": "XCE sends no warning action ahead of the time limit",
    "-wt": "XCE sends no warning action ahead of the time limit",
    "-s": "XCE ends a job with SIGTERM, then SIGKILL",
    "-t": "XCE does not end a job at a deadline: give a run limit with -W",
    "-ptl": "XCE keeps a pending job pending",
    "-eptl": "XCE keeps a pending job pending",
    "-ext": "XCE runs no external scheduler plugin",
    "-extsched": "XCE runs no external scheduler plugin",
    "-freq": "XCE does not set CPU frequencies",
    "-rnc": "XCE does not resize jobs",
    "-ar": "XCE does not resize jobs",
}
_INTERACTIVE = (
    "interactive jobs cannot be submitted from a script: XCE runs batch jobs "
    "(xce job peek -f follows a job's output)"
)
REFUSED = {
    **dict.fromkeys(
        ("-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX", "-tty", "-XF"), _INTERACTIVE
    ),
    "-i": "a job's stdin from a file is not supported: read the file in the script",
    "-is": "a job's stdin from a file is not supported: read the file in the script",
    "-f": "file copies (-f) are not supported: use xce job submit --stage-in/--stage-out",
    "-Zs": "XCE keeps the submitted script itself; there is nothing to spool",
    "-pack": "a script cannot hold a file of job submissions",
    "-json": "a script cannot hold a job description file",
    "-yaml": "a script cannot hold a job description file",
    "-jsdl": "a script cannot hold a job description file",
    "-jsdl_strict": "a script cannot hold a job description file",
}
_PLAIN = {
    "-o": "stdout",
    "-oo": "stdout",
    "-e": "stderr",
    "-eo": "stderr",
    "-cwd": "cwd",
    "-U": "reservation",
    "-P": "account",
    "-G": "account",
}


def apply(tokens: list[str], request: Request) -> None:
    """Every option of one `#BSUB` line, in order."""
    i = 0
    while i < len(tokens):
        name = tokens[i]
        i += 1
        if not name.startswith("-") or name == "-":
            request.refuse(f"{name!r} is not a #BSUB option")
            continue
        value = ""
        if name not in FLAGS:
            known = name in _HANDLERS or name in IGNORED or name in REFUSED
            if i < len(tokens) and (known or not tokens[i].startswith("-")):
                value = tokens[i]
                i += 1
            elif known:
                raise ValueError(f"{name} needs a value")
        one(name, value, request)


def one(name: str, value: str, request: Request) -> None:
    """One option and its value ("" for a flag)."""
    handler = _HANDLERS.get(name)
    if handler is not None:
        try:
            handler(request, name, value)
        except Unsupported as exc:  # what XCE cannot do: an error, or a warning if lenient
            request.refuse(str(exc), exc.at)
    elif name in REFUSED:
        request.refuse(REFUSED[name])
    elif name in IGNORED:
        request.warn(f"{name} is ignored: {IGNORED[name]}")
    else:
        request.refuse(f"unknown or unsupported #BSUB option {name}")


# --- the handlers ------------------------------------------------------------------------------

Handler = Callable[[Request, str, str], None]
_NAME_ARRAY = re.compile(r"^(.*?)\[([^\]]+)\](%\d+)?$")
_LSF_WALLTIME = re.compile(r"^\d+(?::\d+)?$")


def _plain(request: Request, name: str, value: str) -> None:
    request.options[_PLAIN[name]] = value


def _queue(request: Request, name: str, value: str) -> None:
    queues = value.split()
    if not queues:
        raise ValueError("-q needs a queue name")
    if len(queues) > 1:
        request.warn(f"XCE submits to one queue: {queues[0]} (of {value})")
    request.options["queue"] = queues[0]


def _slots(request: Request, name: str, value: str) -> None:
    """`-n N` or `-n MIN,MAX` (XCE takes MIN)."""
    low, sep, high = value.partition(",")
    request.layout(tasks=whole(name, low))
    if sep:
        whole(name, high)


def _memory(request: Request, name: str, value: str) -> None:
    """`-M 4000` (MB), `-M 4GB`; a trailing `!` (enforced) changes nothing: XCE always
    enforces it."""
    request.memory("memory", megabytes(value.rstrip("!")))


def _walltime(request: Request, name: str, value: str) -> None:
    """`[hour:]minute[/host]`: the `/host` normalisation is dropped with a warning."""
    limit, _, host = value.partition("/")
    if not _LSF_WALLTIME.match(limit.strip()):
        raise ValueError(f"-W {value!r}: use minutes or hours:minutes")
    if host:
        request.warn(f"the run limit is not normalised to host {host}: {limit} on any host")
    request.options["walltime"] = limit.strip()


def _resources(request: Request, name: str, value: str) -> None:
    add_lsf(value, request)


def _job_name(request: Request, name: str, value: str) -> None:
    m = _NAME_ARRAY.match(value)
    if m:
        request.options["name"] = m.group(1)
        request.options["array"] = m.group(2) + (m.group(3) or "")
    else:
        request.options["name"] = value


def _dependency(request: Request, name: str, value: str) -> None:
    request.options["dependency"] = lsf_dependency(value)


def _hold(request: Request, name: str, value: str) -> None:
    request.options["hold"] = True


def _exclusive(request: Request, name: str, value: str) -> None:
    request.options["exclusive"] = True


def _begin(request: Request, name: str, value: str) -> None:
    request.options["begin"] = lsf_begin(value)


def _environment(request: Request, name: str, value: str) -> None:
    """`all`, `none`, `all, ~VAR, VAR=x`: `~VAR` (leave out) is a warning."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    left_out = [item for item in items if item.startswith("~")]
    if left_out:
        request.warn(f"{', '.join(left_out)}: XCE cannot leave variables out; they are passed")
    request.options["export"] = ",".join(item for item in items if not item.startswith("~"))


def _hosts(request: Request, name: str, value: str) -> None:
    """`-m "h1 h2+2 others"`: the job runs on one of these hosts. Preference levels
    (`+N`) are dropped; `others` lifts the restriction (any host may run it)."""
    words = value.split()
    names = [re.sub(r"\+\d+$", "", w) for w in words]
    if names != words:
        request.warn("host preferences (+N) are ignored: XCE picks among the hosts by score")
    if "others" in names:
        request.warn("-m with others: any host may run the job; the hosts are not preferred")
        return
    request.requirement.add_select(hosts_select(host_names(",".join(names), name)))


def _nodes(request: Request, name: str, value: str) -> None:
    """`-nnodes N` (LSF with CSM): N whole hosts."""
    request.layout(nodes=whole(name, value))
    request.options["exclusive"] = True
    request.warn(
        f"{value} whole hosts (exclusive): the job's slots are one per host unless -n says more"
    )


def _gpu(request: Request, name: str, value: str) -> None:
    count, unit = lsf_gpu(value, request)
    request.gpus_per_host(count, unit)


_GPU_MODES = {"shared", "exclusive_process"}


def lsf_gpu(value: str, request: Request) -> tuple[int, GpuUnit]:
    """`-gpu -` (the default: one per host) or `num=N[/task|/host]:mode=...:j_exclusive=...`;
    other keys (`gmodel`, `gmem`, `mps`, `aff`...) are warnings naming them."""
    if value.strip() == "-":
        return 1, "host"
    fields: dict[str, str] = {}
    for part in (p.strip() for p in value.split(":")):
        key, eq, item = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"-gpu {value!r}: {part!r} is not KEY=VALUE (e.g. num=2:mode=shared)")
        fields[key.strip()] = item.strip()
    count, _, per = fields.pop("num", "1").partition("/")
    if not count.isdigit() or per not in ("", "task", "host"):
        raise ValueError(f"-gpu num={count}{'/' + per if per else ''}: use N, N/task or N/host")
    mode = fields.pop("mode", "shared")
    if mode not in _GPU_MODES:
        raise ValueError(f"-gpu mode={mode}: use shared or exclusive_process")
    if mode == "exclusive_process":
        request.warn("-gpu mode=exclusive_process: XCE does not set GPU compute modes")
    if fields.pop("j_exclusive", "yes") == "no":
        request.warn("-gpu j_exclusive=no: XCE gives each job its GPUs alone")
    if fields:
        request.warn(f"-gpu {', '.join(sorted(fields))} ignored: XCE asks a GPU count only")
    return int(count), "task" if per == "task" else "host"


_LSF_DEP = re.compile(r"^\s*(\w+)\(\s*([^)]*?)\s*\)\s*$")
_LSF_KIND = {
    "done": "afterok",
    "post_done": "afterok",
    "ended": "afterany",
    "exit": "afternotok",
    "post_err": "afternotok",
}
_JOB_REF = re.compile(r"^\d+(?:\[\d+\])?$")


def lsf_dependency(text: str) -> str:
    """`done(12) && ended(13)` -> `afterok:12,afterany:13`; `-w 12` is done(12)."""
    if "||" in text or "!" in text:
        raise Unsupported("'||' and '!' in a dependency are not supported: all terms must hold")
    terms = []
    for part in (p.strip() for p in text.split("&&")):
        if _JOB_REF.match(part):
            terms.append(f"afterok:{part}")
            continue
        m = _LSF_DEP.match(part)
        if m is None:
            raise ValueError(
                f"dependency {part!r}: use done(ID), ended(ID) or exit(ID) joined by &&"
            )
        kind, ref = m.groups()
        if kind not in _LSF_KIND:
            raise Unsupported(
                f"dependency {kind}() is not supported (XCE reads done, ended, exit, "
                "post_done and post_err)"
            )
        ref = ref.strip("\"'")
        if not _JOB_REF.match(ref):
            raise Unsupported(
                f"dependency {part!r}: name the job by its id (job names, wildcards and exit "
                "codes are not supported)"
            )
        terms.append(f"{_LSF_KIND[kind]}:{ref}")
    return ",".join(terms)


_HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_PLAIN, _plain),
    "-q": _queue,
    "-n": _slots,
    "-M": _memory,
    "-W": _walltime,
    "-R": _resources,
    "-J": _job_name,
    "-w": _dependency,
    "-H": _hold,
    "-x": _exclusive,
    "-b": _begin,
    "-env": _environment,
    "-m": _hosts,
    "-nnodes": _nodes,
    "-gpu": _gpu,
}
