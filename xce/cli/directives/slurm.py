"""`#SBATCH` lines: sbatch's options as `xce job submit` options.

Each option has a handler (what it becomes), a reason it is only a warning (`IGNORED`: what
XCE does instead), or a reason it is refused (`REFUSED`); anything else is an unknown option,
refused naming the line (a warning with `--lenient`). Tasks, nodes and CPUs per task become
slots and a span once the whole script is read (xce/cli/directives/request.py).
"""

from __future__ import annotations

from collections.abc import Callable

from xce.cli.directives.model import Unsupported
from xce.cli.directives.request import GpuUnit, Request
from xce.cli.directives.resources import (
    constraint_select,
    host_names,
    hosts_select,
    tmp_select,
)
from xce.cli.directives.units import megabytes, slurm_seconds, whole

SHORT = {
    "-n": "--ntasks",
    "-c": "--cpus-per-task",
    "-N": "--nodes",
    "-t": "--time",
    "-p": "--partition",
    "-J": "--job-name",
    "-o": "--output",
    "-e": "--error",
    "-a": "--array",
    "-d": "--dependency",
    "-H": "--hold",
    "-D": "--chdir",
    "-G": "--gpus",
    "-i": "--input",
    "-A": "--account",
    "-q": "--qos",
    "-w": "--nodelist",
    "-x": "--exclude",
    "-C": "--constraint",
    "-L": "--licenses",
    "-m": "--distribution",
    "-k": "--no-kill",
    "-O": "--overcommit",
    "-s": "--oversubscribe",
    "-Q": "--quiet",
    "-v": "--verbose",
    "-W": "--wait",
    "-S": "--core-spec",
    "-B": "--extra-node-info",
    "-M": "--clusters",
}
# Options that never take a value, and those that take one only after `=`.
FLAGS = {
    "--hold",
    "--requeue",
    "--no-requeue",
    "--overcommit",
    "--oversubscribe",
    "--contiguous",
    "--spread-job",
    "--use-min-nodes",
    "--parsable",
    "--quiet",
    "--verbose",
    "--wait",
    "--reboot",
    "--ignore-pbs",
}
OPTIONAL = {"--exclusive", "--get-user-env", "--propagate", "--nice", "--no-kill"}

_PLACEMENT = "XCE does not bind tasks to cores, sockets or memory, nor lay them out in a host"
_NO_FIELD = "XCE records no such job field"
IGNORED = {
    **dict.fromkeys(
        (
            "--hint",
            "--distribution",
            "--mem-bind",
            "--cpu-bind",
            "--threads-per-core",
            "--ntasks-per-core",
            "--ntasks-per-socket",
            "--sockets-per-node",
            "--cores-per-socket",
            "--extra-node-info",
            "--core-spec",
            "--thread-spec",
            "--gres-flags",
            "--gpu-bind",
            "--spread-job",
            "--use-min-nodes",
            "--contiguous",
            "--overcommit",
            "--oversubscribe",
        ),
        _PLACEMENT,
    ),
    **dict.fromkeys(("--comment", "--wckey", "--profile", "--acctg-freq"), _NO_FIELD),
    "--switches": "XCE does not place jobs by network switch",
    "--propagate": "XCE does not copy the submitter's resource limits (ulimit) to the job",
    "--signal": "XCE sends no signal ahead of the time limit; at the limit the job gets "
    "SIGTERM, then SIGKILL",
    "--requeue": "requeueing after a host failure is the queue's on_host_failure policy",
    "--no-requeue": "requeueing after a host failure is the queue's on_host_failure policy",
    "--mail-type": "XCE sends no mail",
    "--mail-user": "XCE sends no mail",
    "--nice": "a script cannot set the priority: use xce job submit --priority",
    "--priority": "a script cannot set the priority: use xce job submit --priority",
    "--time-min": "XCE does not shorten a job's time limit to start it sooner",
    "--deadline": "XCE does not cancel a job at a deadline",
    "--no-kill": "a job across hosts ends when one of its hosts fails",
    "--kill-on-invalid-dep": "a job whose dependency can never hold stays pending (xce job "
    "show tells why)",
    "--wait": "xce job submit returns at once: use xce job wait ID",
    "--parsable": "xce job submit --json prints the id for scripts",
    "--quiet": "it changes nothing in the job",
    "--verbose": "it changes nothing in the job",
    "--cpu-freq": "XCE does not set CPU frequencies",
    "--gpu-freq": "XCE does not set GPU frequencies",
    "--cpus-per-gpu": "ask for CPUs with --ntasks/--cpus-per-task",
    "--network": "XCE does not allocate network resources",
    "--reboot": "XCE does not reboot hosts for a job",
    "--ignore-pbs": "XCE reads no #PBS lines",
    "--mcs-label": _NO_FIELD,
}
REFUSED = {
    "--input": "a job's stdin from a file is not supported: read the file in the script",
    "--mem-per-gpu": "memory per GPU is not supported: give --mem (per host) or --mem-per-cpu",
    "--uid": "a script cannot submit as another user: use xce job submit --user",
    "--gid": "a script cannot choose the job's group",
    "--clusters": "XCE runs one cluster: submit to its controller",
    "--x11": "X11 forwarding is for interactive jobs; XCE runs batch jobs",
    "--test-only": "a script cannot ask for a test submission",
    "--wrap": "--wrap gives a command instead of a script: use xce job submit -- CMD",
}

_PLAIN = {
    "--job-name": "name",
    "--output": "stdout",
    "--error": "stderr",
    "--array": "array",
    "--chdir": "cwd",
    "--export": "export",
    "--reservation": "reservation",
    "--begin": "begin",
    "--account": "account",
    "--qos": "qos",
}


def apply(tokens: list[str], request: Request) -> None:
    """Every option of one `#SBATCH` line, in order."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            request.refuse(f"{token!r} is not an #SBATCH option")
            continue
        name, eq, value = token.partition("=")
        if not name.startswith("--") and len(name) > 2 and name[:2] in SHORT:
            name, value, eq = name[:2], token[2:], "="  # -n4
        name = SHORT.get(name, name)
        if not eq and name not in FLAGS and name not in OPTIONAL:
            if i >= len(tokens) or (_unknown(name) and tokens[i].startswith("-")):
                if not _unknown(name):
                    raise ValueError(f"{token} needs a value")
            else:
                value = tokens[i]
                i += 1
        one(name, value, request)


def _unknown(name: str) -> bool:
    return name not in _HANDLERS and name not in IGNORED and name not in REFUSED


def one(name: str, value: str, request: Request) -> None:
    """One option and its value ("" for a flag)."""
    handler = _HANDLERS.get(name)
    if handler is not None:
        try:
            handler(request, name, value)
        except Unsupported as exc:  # what XCE cannot do: an error, or a warning if lenient
            request.refuse(str(exc), exc.at)
    elif name in IGNORED:
        request.warn(f"{name} is ignored: {IGNORED[name]}")
    elif name in REFUSED:
        request.refuse(REFUSED[name])
    else:
        request.refuse(f"unknown or unsupported #SBATCH option {name}")


# --- the handlers ------------------------------------------------------------------------------

Handler = Callable[[Request, str, str], None]


def _plain(request: Request, name: str, value: str) -> None:
    request.options[_PLAIN[name]] = value


def _partition(request: Request, name: str, value: str) -> None:
    first = value.split(",")[0].strip()
    if "," in value:
        request.warn(f"XCE submits to one queue: {first} (of {value})")
    request.options["queue"] = first


def _ntasks(request: Request, name: str, value: str) -> None:
    request.layout(tasks=whole(name, value))


def _cpus(request: Request, name: str, value: str) -> None:
    request.layout(cpus_per_task=whole(name, value))


def _per_node(request: Request, name: str, value: str) -> None:
    request.layout(per_node=whole(name, value))


def _nodes(request: Request, name: str, value: str) -> None:
    """`N` or a range `N-M` (Slurm may pick any count in it; XCE takes the least)."""
    low, sep, high = value.partition("-")
    count = whole(name, low)
    if sep:
        whole(name, high)
        request.warn(f"XCE runs the job on the least node count of {value}: {count}")
    request.layout(nodes=count)


def _mem(request: Request, name: str, value: str) -> None:
    size = megabytes(value)
    if size == 0:
        request.warn(
            "--mem=0 (all of each host's memory in Slurm) asks for no memory in XCE: "
            "use --exclusive for whole hosts"
        )
        return
    request.memory("memory", size)


def _mem_per_cpu(request: Request, name: str, value: str) -> None:
    request.memory("mem_per_cpu", megabytes(value))


def _time(request: Request, name: str, value: str) -> None:
    if value.strip().upper() in ("UNLIMITED", "INFINITE"):
        request.warn("no time limit is asked: the queue's limit applies")
        return
    request.options["walltime"] = f"{slurm_seconds(value)}s"


def _hold(request: Request, name: str, value: str) -> None:
    request.options["hold"] = True


def _exclusive(request: Request, name: str, value: str) -> None:
    request.options["exclusive"] = True
    if value:
        request.warn(f"--exclusive={value} is taken as --exclusive: whole hosts for this job")


_GPU_UNITS: dict[str, GpuUnit] = {
    "--gpus": "job",
    "--gpus-per-node": "host",
    "--gpus-per-task": "task",
}


def _gpus(request: Request, name: str, value: str) -> None:
    request.gpus_per_host(_gpu_count(name, value, request), _GPU_UNITS[name])


def _gres(request: Request, name: str, value: str) -> None:
    """`gpu:2`, `gpu:a100:2`, `gpu` (one); other kinds are warnings (a script cannot ask
    devices other than GPUs; `xce job submit --gres` can)."""
    for item in (p.strip() for p in value.split(",")):
        kind = item.split(":")[0]
        if kind == "gpu":
            request.gpus_per_host(_gpu_count(name, item, request))
        elif kind and kind != "none":
            request.warn(f"{kind} is ignored: use xce job submit --gres {item}")


def _gpu_count(name: str, value: str, request: Request) -> int:
    """`2`, `gpu:2`, `gpu:a100:2`, `a100:2`, `gpu` -> the count; a GPU type is a warning."""
    parts = value.split(":")
    if parts[0] == "gpu":
        parts = parts[1:]
    count = parts.pop() if parts and parts[-1].isdigit() else "1"
    if parts:
        request.warn(
            f"the GPU type {':'.join(parts)} is not asked: XCE counts GPUs of any model "
            '(select one with --constraint or -R "select[gpu_model==...]")'
        )
    return whole(name, count, 0)


def _dependency(request: Request, name: str, value: str) -> None:
    request.options["dependency"] = slurm_dependency(value)


def slurm_dependency(text: str) -> str:
    """`afterok:12:13,afterany:14_2` -> XCE's `afterok:12:13,afterany:14[2]`; the kinds XCE
    lacks are refused naming them."""
    from xce.core.deps import KINDS

    if "?" in text:
        raise Unsupported("'?' (any one of) in a dependency is not supported: all must hold")
    terms = []
    for part in text.split(","):
        kind, _, refs = part.strip().partition(":")
        if kind not in KINDS:
            raise Unsupported(f"dependency {kind!r} is not supported (XCE has {', '.join(KINDS)})")
        ids = []
        for ref in refs.split(":"):
            if "+" in ref:
                raise Unsupported(
                    f"dependency {part.strip()!r}: a delay (+minutes) is not supported"
                )
            job, sep, index = ref.partition("_")
            ids.append(f"{job}[{index}]" if sep else job)
        terms.append(f"{kind}:{':'.join(ids)}")
    return ",".join(terms)


def _nodelist(request: Request, name: str, value: str) -> None:
    names = host_names(value, name)
    request.requirement.add_select(hosts_select(names))
    if len(names) > 1:
        request.warn(
            "the job runs on hosts among those listed (Slurm's --nodelist uses all of them)"
        )


def _exclude(request: Request, name: str, value: str) -> None:
    request.requirement.add_select(hosts_select(host_names(value, name), exclude=True))


def _constraint(request: Request, name: str, value: str) -> None:
    request.requirement.add_select(constraint_select(value, request, name))


def _licenses(request: Request, name: str, value: str) -> None:
    """`matlab:2,ansys` (one ansys); `name@server` drops the server."""
    for item in (p.strip() for p in value.split(",")):
        if not item:
            continue
        license_name, sep, count = item.partition(":")
        if "@" in license_name:
            license_name = license_name.split("@")[0]
            request.warn(f"the license server of {item} is ignored: XCE counts licenses itself")
        request.add_license(license_name, whole(f"{name} {license_name}", count, 0) if sep else 1)


def _tmp(request: Request, name: str, value: str) -> None:
    request.requirement.add_select(tmp_select(megabytes(value)))


def _mincpus(request: Request, name: str, value: str) -> None:
    request.requirement.add_select(f"maxslots>={whole(name, value)}")


def _get_user_env(request: Request, name: str, value: str) -> None:
    request.get_user_env = True
    request.warn(
        "XCE passes the submitter's environment (--export ALL), not a fresh login "
        "environment of the execution host"
    )


def _open_mode(request: Request, name: str, value: str) -> None:
    if value not in ("append", "truncate"):
        raise ValueError(f"--open-mode {value!r}: use append or truncate")
    if value == "append":
        request.warn(
            "XCE writes the -o/-e files when the job ends, replacing what they held "
            "(truncate); use --open-mode=truncate or write to a new file"
        )


_HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_PLAIN, _plain),
    "--partition": _partition,
    "--ntasks": _ntasks,
    "--cpus-per-task": _cpus,
    "--ntasks-per-node": _per_node,
    "--nodes": _nodes,
    "--mem": _mem,
    "--mem-per-cpu": _mem_per_cpu,
    "--time": _time,
    "--hold": _hold,
    "--exclusive": _exclusive,
    "--gpus": _gpus,
    "--gpus-per-node": _gpus,
    "--gpus-per-task": _gpus,
    "--gres": _gres,
    "--dependency": _dependency,
    "--nodelist": _nodelist,
    "--exclude": _exclude,
    "--constraint": _constraint,
    "--licenses": _licenses,
    "--tmp": _tmp,
    "--mincpus": _mincpus,
    "--get-user-env": _get_user_env,
    "--open-mode": _open_mode,
}
