"""`xce job ...`: submit, list, show, stop, resume, requeue, kill, output, peek, wait."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from xce.cli.common import call, call_light, fail, print_json, print_table, show_record

T = TypeVar("T")
app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")

_WALLTIME = re.compile(r"^(?:(\d+):)?(\d+)(?::(\d+))?$")


def parse_walltime(text: str) -> int:
    """LSF/Slurm style: `30` (minutes), `1:30` (H:MM), `1:30:00` (H:MM:SS), `90s`, `2h`."""
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text and text[-1] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    m = _WALLTIME.match(text)
    if not m:
        fail(f"walltime {text!r}: use minutes (30), H:MM, H:MM:SS or 90s/45m/2h")
    g = m.group
    if g(3) is not None:
        return int(g(1) or 0) * 3600 + int(g(2)) * 60 + int(g(3))
    if g(1) is not None:
        return int(g(1)) * 3600 + int(g(2)) * 60
    return int(g(2)) * 60


def parse_begin_option(text: str) -> float:
    """`--begin` in the user's local time (as sbatch reads it), sent as epoch seconds."""
    from xce.core.begin import parse_begin
    from xce.core.errors import InvalidRequest

    try:
        return parse_begin(text, time.time(), local=True)
    except InvalidRequest as e:
        fail(str(e))
        raise  # unreachable: fail exits


@app.command()
def submit(
    command: list[str] = typer.Argument(
        None,
        help="command and arguments, or one script file (its #XCE/#BSUB/#SBATCH "
        "lines are read); a script on stdin when left out",
    ),
    script: Path = typer.Option(None, "--script", help="run this script file instead"),
    queue: str = typer.Option(None, "--queue", "-q"),
    name: str = typer.Option("", "--name", "-J"),
    slots: int = typer.Option(1, "--slots", "-n", help="cores/slots"),
    memory: str = typer.Option(
        "0", "--mem", "-M", help="memory per host: MB, or with a unit (512M, 4G, 1T)"
    ),
    mem_per_cpu: str = typer.Option(
        "0", "--mem-per-cpu", help="memory per slot (as --mem), instead of --mem"
    ),
    exclusive: bool = typer.Option(
        False, "--exclusive", "-x", help="whole hosts: no other job shares them"
    ),
    walltime: str = typer.Option(None, "--walltime", "-W", help="minutes, H:MM[:SS], 90s, 2h"),
    stdout: str = typer.Option(
        None,
        "--output",
        "-o",
        help="the job's stdout file (%J job id, %I array index; "
        "%j, %a, %A as sbatch), relative to its working directory",
    ),
    stderr: str = typer.Option(None, "--error", "-e", help="the job's stderr file (as -o)"),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE (repeat)"),
    export: str = typer.Option(
        None, "--export", help="environment to pass: ALL (default), NONE, or VAR,VAR=VALUE,..."
    ),
    cwd: str = typer.Option(
        None,
        "--cwd",
        "--chdir",
        "-D",
        help="working directory on the host (relative: to this directory); "
        "default: the directory you submit from",
    ),
    account: str = typer.Option(
        None, "--account", "-A", "-P", help="accounting group to charge (one of yours)"
    ),
    qos: str = typer.Option(None, "--qos", help="a QOS name the site maps to a queue"),
    array: str = typer.Option(None, "--array", "-a", help="e.g. 1-1000:2%10"),
    dependency: str = typer.Option(None, "--dependency", "-d", help="afterok:ID,afterany:ID"),
    stage_in: list[str] = typer.Option([], "--stage-in", help="LOCAL[:JOBPATH] copied in (repeat)"),
    stage_out: list[str] = typer.Option(
        [], "--stage-out", help="output file pattern brought back (repeat)"
    ),
    inputs: list[str] = typer.Option(
        [], "--input", "-i", hidden=True, help="old spelling of --stage-in"
    ),
    hold: bool = typer.Option(False, "--hold", "-H", help="submit suspended (PSUSP)"),
    begin: str = typer.Option(
        None,
        "--begin",
        "-b",
        help="not before this local time: YYYY-MM-DD[THH:MM[:SS]], "
        "HH:MM[:SS], now+N[s|m|h|d|w], epoch seconds",
    ),
    resources: str = typer.Option(
        "", "--resources", "-R", help="LSF resource requirement, e.g. 'select[mem>4000]'"
    ),
    gpus: int = typer.Option(None, "--gpus", help="GPUs on the job's host (same as --gres gpu:N)"),
    gres: str = typer.Option(None, "--gres", help="devices per host, e.g. gpu:2,fpga:1"),
    licenses: str = typer.Option(
        None, "--license", help="cluster-wide licenses, e.g. matlab:1,ansys:2"
    ),
    user: str = typer.Option(None, "--user", help="submit as this user (admins)"),
    reservation: str = typer.Option(
        None, "--reservation", "-U", help="run in this advance reservation (xce rsv list)"
    ),
    priority: int = typer.Option(
        None, "--priority", help="job priority (users: at most the default)"
    ),
    lenient: bool = typer.Option(
        False, "--lenient", help="unknown script directives are warnings, not errors"
    ),
    defer: bool = typer.Option(
        False, "--defer", help="accept it though no registered host could run it yet"
    ),
    quiet: bool = typer.Option(False, "--quiet", help="no progress display for --stage-in"),
    as_json: bool = typer.Option(False, "--json"),
    batch: str = typer.Option(
        None,
        "--batch",
        help="one job per line of this file ('-': stdin), each line the arguments of "
        "xce job submit; all over one connection, one job id printed per line",
    ),
    controller: list[str] = CONTROLLER,
) -> None:
    """Submit a job (or an array with --array). Prints the job id.

    A script (a file argument, --script, or stdin) may carry options in its leading comment
    block: #XCE lines (these options), #BSUB and #SBATCH lines (translated); options on the
    command line win. The job belongs to the user of your token (xce login); --user needs
    user:impersonate (admins). --batch FILE submits many jobs, one per line, in one go."""
    if batch is not None:
        from xce.cli.batch import submit_batch

        submit_batch(batch, command, controller, quiet)
        return
    body, staged = prepare(locals(), sys.argv[1:])
    run = functools.partial(_submit_with_uploads, body, staged, quiet=quiet)
    result = call_light(run, controller)
    if as_json:
        print_json(result)
    else:
        for warning in result.get("warnings", ()):
            typer.echo(f"xce: warning: {warning}", err=True)
        typer.echo(f"Job <{result['job_id']}> is submitted to queue <{result['queue']}>.")


def prepare(
    values: dict[str, Any], args: list[str], parser: Any = None
) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """The body and the files to upload of one `xce job submit`: `values` are `submit`'s
    parameters, `args` the words after `xce` (which options they name, whether `--` is
    among them); `parser` the fast path's parser of `submit` where the caller has one."""
    from xce.cli import submitting

    given = {key: values[key] for key in submitting.DEFAULTS}  # what a directive may set
    draft, staged = submitting.build(
        values["command"],
        values["script"],
        values["inputs"],
        given,
        values["lenient"],
        submitting.explicit_options(args, parser),
        after_dashes=submitting.dashes_given(args),
    )
    if values["defer"]:
        draft["defer"] = True
    return _submit_body(draft, values["gres"], values["licenses"], values["priority"]), staged


def _submit_body(
    draft: dict[str, Any], gres: str | None, licenses: str | None, priority: int | None
) -> dict[str, Any]:
    """The API's submit body (`xce.protocol.bodies.SubmitBody` on the wire, as JSON-ready
    builtins) from `submitting.build`'s draft: walltime and begin read here (in the user's
    time zone), --gpus/--gres/--license as counts.

    A plain dict rather than the Struct: importing msgspec and the body definitions costs
    a `xce job submit` about a tenth of its start, and the controller decodes and checks
    the body anyway (a test decodes what this returns with the Struct). Unset values (None,
    False, empty text and collections: each such field's default) are left out, as the
    Struct's `omit_defaults` did."""
    from xce.cli import submitting

    fields = dict(draft)
    if walltime_text := fields.pop("walltime", None):
        fields["walltime_s"] = parse_walltime(walltime_text)
    gpus = fields.pop("gpus", None)  # the command line's, else a directive's
    if gpus is not None or gres or licenses:
        fields.update(submitting.gres_options(gpus, gres, licenses))
    if begin_text := fields.pop("begin", None):
        fields["begin"] = parse_begin_option(begin_text)
    if priority is not None:
        fields["priority"] = priority
    fields["outputs"] = list(fields.get("outputs", ()))
    return {
        key: value
        for key, value in fields.items()
        if value is not None and value is not False and value != "" and value != [] and value != {}
    }


def _submit_with_uploads(
    body: dict[str, Any], staged: list[tuple[Path, str]], client: Any, quiet: bool = False
) -> dict[str, Any]:
    """Upload the staged files (streamed, hashed as they are sent; progress on a terminal's
    stderr), then submit `body` (`_submit_body`'s) naming them as its inputs."""
    uploads: list[str] = []
    try:
        if staged:
            from xce.cli.transfers import progress_for

            with progress_for(quiet) as bars:
                for path, _ in staged:
                    # only for a controller that wants the digest before the body
                    hashing = bars.track(f"hashing {path.name}", lazy=True)
                    sending = bars.track(path.name)
                    uploads.append(client.upload(path, sending, hashing))
        if staged:
            inputs = {remote: uid for (_, remote), uid in zip(staged, uploads, strict=True)}
            body = {**body, "inputs": inputs}
        result: dict[str, Any] = client.submit(body)
        return result
    except BaseException:
        # Unused uploads count against the quota until they expire: give them back.
        for upload_id in uploads:
            with contextlib.suppress(Exception):
                client.delete_upload(upload_id)
        raise


def _clock(ts: float | None) -> str:
    return time.strftime("%b %d %H:%M", time.localtime(ts)) if ts else "-"


def _duration(seconds: float | None) -> str:
    if not seconds:
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _bytes(n: int | None) -> str:
    if not n:
        return "-"
    size = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return str(size)


_LIST_HEADERS = (
    "JOBID",
    "USER",
    "STAT",
    "QUEUE",
    "FROM_HOST",
    "EXEC_HOST",
    "JOB_NAME",
    "SUBMIT_TIME",
    "RUN_TIME",
    "CPU",
    "MAX_RSS",
)
# `-u all` is every user whose jobs the caller may see, as in bjobs (a user named "all" is
# out of reach here, as there); the CLI sends no user filter then, which any controller reads
# the same way.
ALL_USERS = "all"


@app.command("list")
def list_(
    state: str = typer.Option(None, "--state", "-s", help="e.g. PEND,RUN"),
    user: str = typer.Option(
        None, "--user", "-u", help="only this user's jobs; all: everyone's you may see"
    ),
    queue: str = typer.Option(None, "--queue", "-q"),
    host: str = typer.Option(None, "--host", "-m"),
    array: str = typer.Option(None, "--array"),
    limit: int = typer.Option(1000, "--limit"),
    offset: int = typer.Option(0, "--offset"),
    fmt: str = typer.Option(
        None,
        "--format",
        "-o",
        help="columns: fields (id, user, state, queue, name, slots, hosts, submit_time, "
        "start_time, elapsed, reason, exit_code, array_index, ...: 'Job list output' in the "
        "command reference), e.g. id,user,name:20, or squeue letters, e.g. '%.18i %.9P %.8j %T'",
    ),
    noheader: bool = typer.Option(False, "--noheader", help="leave out the header line"),
    parsable: bool = typer.Option(
        False, "--parsable", help="cells separated by |, without padding"
    ),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = CONTROLLER,
) -> None:
    """List jobs (bjobs/squeue style): every job you may see unless -u names a user.

    --format takes XCE field names (comma- or space-separated, NAME:WIDTH to pad and cut,
    NAME:-WIDTH to right-align) or squeue's %-letters (%i %P %j %u %t %T %M %D %R %N %C %l %S
    %V ..., %.N right-aligned in N columns); --noheader and --parsable work with and
    without it."""
    from xce.cli import fields

    _check_layout(fmt, noheader or parsable, as_json)
    wanted = None if user == ALL_USERS else user
    result = call_light(
        lambda c: c.jobs(
            state=state,
            user=wanted,
            queue=queue,
            host=host,
            array=array,
            limit=limit,
            offset=offset,
        ),
        controller,
    )
    if as_json:
        print_json(result)
        return
    jobs = result["jobs"]
    if fmt:
        text = fields.render(jobs, fmt, header=not noheader, parsable=parsable)
    else:
        text = fields.table(_LIST_HEADERS, _list_rows(jobs), not noheader, parsable)
    sys.stdout.write(text)
    if result["total"] > len(jobs) + offset:
        typer.echo(f"({len(jobs)} of {result['total']} shown; use --offset/--limit)", err=True)


def _check_layout(fmt: str | None, table_options: bool, as_json: bool) -> None:
    """Refuse a bad --format (or one beside --json) before the controller is asked: a typo
    is a one-line usage error, not a listing fetched for nothing."""
    from xce.cli import fields

    if as_json and (fmt or table_options):
        fail("--json takes no --format, --noheader or --parsable", 2)
    if fmt:
        try:
            fields.parse(fmt)
        except fields.FormatError as e:
            fail(str(e), 2)


def _list_rows(jobs: list[dict[str, Any]]) -> list[list[Any]]:
    """The default columns (`_LIST_HEADERS`), bjobs' layout."""
    rows = []
    for j in jobs:
        usage = j.get("usage") or {}
        rows.append(
            [
                j["id"],
                j["user"],
                j["state"],
                j["queue"],
                j.get("submit_host"),
                j.get("exec_host") or j.get("host"),
                j["name"],
                _clock(j.get("submit_time")),
                _duration(usage.get("wall_time_s")),
                _duration(usage.get("cpu_time_s")),
                _bytes(usage.get("max_rss_bytes")),
            ]
        )
    return rows


@app.command()
def show(
    job_id: str, as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """Show everything about one job, task or array (local times; ISO 8601 with --json)."""
    from xce.client.readable import iso_times, readable_job

    record = call_light(lambda c: c.job(job_id), controller)
    shown = iso_times(record) if as_json else readable_job(record)
    if not as_json and shown.get("expected_end") is not None:  # the run-time prediction
        from xce.client.readable import duration, local_time

        shown["expected_end"] = local_time(shown["expected_end"])
        shown["predicted_run_s"] = duration(shown.get("predicted_run_s"))
    show_record(shown, as_json)


def _control(action: str, verb: str) -> Callable[..., None]:
    def command(
        job_ids: list[str] = typer.Argument(..., help="job, task or array ids"),
        controller: list[str] = CONTROLLER,
    ) -> None:
        def run(client: Any) -> list[str]:
            done = []
            for job_id in job_ids:
                done.extend(client.control(job_id, action)["jobs"])
            return done

        for job_id in call_light(run, controller):
            typer.echo(f"Job <{job_id}> is being {verb}")

    command.__doc__ = f"{action.capitalize()} jobs."
    return command


app.command("stop")(_control("stop", "suspended"))
app.command("resume")(_control("resume", "resumed"))
app.command("requeue")(_control("requeue", "requeued"))
app.command("kill")(_control("kill", "terminated"))


@app.command()
def output(
    job_id: str,
    file: str = typer.Option("stdout", "--file", "-f", help="stdout, stderr or an output path"),
    list_files: bool = typer.Option(False, "--list", "-l", help="list the job's files"),
    dest: Path = typer.Option(
        None, "--dest", help="download the job's declared outputs into this directory"
    ),
    everything: bool = typer.Option(False, "--all", help="with --dest: stdout and stderr too"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress display"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Print a job's stdout (or another output file), list or download its files.

    Files are streamed (any size), resumed where a connection broke, and checked against
    the controller's SHA-256: a --dest file that does not match is removed. Progress goes to
    stderr when it is a terminal. An array's files are its tasks': give a task id (12[3]);
    the array's own number is an error that names its tasks."""
    from xce.cli import transfers

    if list_files:
        files = call(_tasks_named(job_id, lambda c: c.files(job_id)), controller)
        rows = [[transfers.entry_name(f), f["size"], f.get("sha256") or "-"] for f in files]
        print_table(["FILE", "SIZE", "SHA256"], rows)
        return
    if everything and dest is None:
        fail("--all goes with --dest (it adds stdout and stderr to the outputs)", 2)
    if dest is not None:
        with transfers.progress_for(quiet) as bars:

            async def fetch_all(client: Any) -> list[str]:
                return await transfers.to_directory(
                    client, job_id, dest, everything, bars, typer.echo
                )

            problems = call(_tasks_named(job_id, fetch_all), controller)
        for problem in problems:
            typer.echo(f"xce: error: {problem}", err=True)
        if problems:
            raise typer.Exit(1)
        return
    try:
        with transfers.progress_for(quiet, to_stdout=True) as bars:
            call(
                _tasks_named(job_id, lambda c: transfers.to_stdout(c, job_id, file, bars)),
                controller,
            )
    except transfers.StdoutGone:  # `xce job output 7 | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _tasks_named(
    job_id: str, fetch: Callable[[Any], Awaitable[T]]
) -> Callable[[Any], Awaitable[T]]:
    """`fetch(client)`, where "job 12 does not exist" for an array's own number becomes an
    error naming its tasks: files belong to tasks, and a user who knows the array's number
    should learn which id to ask for instead of being told it does not exist."""
    from xce.client.errors import ApiError

    async def run(client: Any) -> T:
        try:
            return await fetch(client)
        except ApiError as exc:
            if exc.status != 404 or "[" in job_id:
                raise
            raise await _array_error(client, job_id, exc) from None

    return run


async def _array_error(client: Any, job_id: str, error: Exception) -> Exception:
    """The error for `job_id` when it is an array (its tasks, and one to ask for), else
    `error` unchanged."""
    from xce.client.errors import ApiError

    try:
        view = await client.job(job_id)
    except ApiError:
        return error
    if view.get("kind") != "array":
        return error
    return ApiError(404, "array", array_message(view["id"], view["array"]["spec"]))


def array_message(number: str, spec: str) -> str:
    """`job 12 is an array: its tasks are 12[1-100] (...)`: the task ids in the form
    listings show an array's tasks in, and the first as an example (quoted: `12[1]` is a
    shell glob)."""
    first = re.match(r"\d+", spec)
    example = f"{number}[{first.group(0) if first else spec}]"
    return (
        f"job {number} is an array: its tasks are {number}[{spec}] "
        f"(ask for one, e.g. xce job output '{example}')"
    )


def _note(text: str) -> None:
    sys.stdout.flush()
    typer.echo(f"[xce: {text}]", err=True)


@app.command()
def peek(
    job_id: str,
    stderr: bool = typer.Option(False, "--stderr", "-e", help="show stderr, not stdout"),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="keep printing new output until the job ends"
    ),
    interval: float = typer.Option(1.0, "--interval", help="seconds between polls with -f"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Show a job's output so far, running or finished (LSF bpeek); -f follows it.

    While a job runs the controller holds the last 256 KiB of each stream (sent by the
    worker every few seconds); output before that is reported as no longer held. A finished
    job's output comes from the file its worker returned. Ctrl-C stops following."""
    import asyncio

    stream = "stderr" if stderr else "stdout"

    async def run(client: Any) -> None:
        offset, attempt = 0, None
        while True:
            answer = await client.tail(job_id, stream, offset)
            if attempt is not None and answer["attempt"] != attempt:
                _note(f"job {job_id} was requeued: following attempt {answer['attempt']}")
                offset, attempt = 0, answer["attempt"]
                continue
            attempt = answer["attempt"]
            if answer["truncated"]:
                _note(
                    f"{answer['offset'] - offset} bytes of earlier output are no longer "
                    "held (the complete file arrives when the job ends)"
                )
            if answer["data"]:
                try:
                    sys.stdout.write(answer["data"])
                    sys.stdout.flush()
                except BrokenPipeError:  # `xce job peek 7 | head`
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                    return
            moved = answer["next_offset"] > offset
            offset = answer["next_offset"]
            if moved and offset < answer["end"]:
                continue  # more is held already
            if not follow or (answer["state"] in ("DONE", "EXIT") and not answer["running"]):
                if offset == 0 and answer["state"] in ("PEND", "PSUSP"):
                    _note(f"job {job_id} is {answer['state']}: it has not started yet")
                if answer.get("not_returned"):
                    _note(f"the job's {stream} was not returned: {answer['not_returned']}")
                return
            await asyncio.sleep(interval)

    try:
        call(run, controller)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command()
def wait(
    job_id: str,
    timeout: float = typer.Option(0, "--timeout", help="seconds, 0 = no limit"),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="no progress of an array's tasks on stderr"
    ),
    controller: list[str] = CONTROLLER,
) -> None:
    """Wait until a job ends; exit 0 if it is DONE, 1 if EXIT. On a terminal an array
    shows its tasks done out of all, by state (xce/cli/array_progress.py)."""
    from xce.cli.array_progress import ArrayProgress

    progress = ArrayProgress(job_id) if ArrayProgress.wanted(quiet) else None

    def run(client: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                job = client.job(job_id)
                if progress is not None:
                    progress.update(job)
                if job["state"] in ("DONE", "EXIT"):
                    return job
                if deadline is not None and time.monotonic() > deadline:
                    return job
                time.sleep(0.5)
        finally:
            if progress is not None:
                progress.close()

    job = call_light(run, controller)
    typer.echo(f"Job <{job_id}> is {job['state']}")
    if job["state"] != "DONE":
        raise typer.Exit(1)


def _register_eff() -> None:
    """`xce job eff ID` (like seff) lives with the accounting commands (xce/cli/acct.py)."""
    from xce.cli.acct import eff

    app.command("eff")(eff)


_register_eff()


def _register_changes() -> None:
    """`xce job modify` and `xce job priority` live in xce/cli/job_changes.py."""
    from xce.cli.job_changes import modify, priority

    app.command("modify")(modify)
    app.command("priority")(priority)


_register_changes()
