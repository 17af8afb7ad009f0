"""`xce job submit --batch FILE`: many jobs from one start of `xce` and one connection.

Why: scripts that loop over `xce job submit` pay a Python start and a new connection for
every job (a few jobs a second on a busy login node); sbatch users expect hundreds. The
batch form reads every job first, then sends them one after another over the light client's
one kept-alive connection, each its own request and so its own `JobSubmitted` event, checked
and logged exactly as a single submit is.

The format, one job a line: the words `xce job submit` would take after `submit`, split as
the shell splits them (`shlex`: quotes and backslashes; no variables, globs or
redirections; a `#` that starts a word outside quotes starts a comment, as in the shell and
in script directives). Blank lines and lines starting with `#` are skipped. Each line is read as if
`cd DIR && xce job submit LINE` ran, DIR being the file's directory (for `--batch -`, stdin,
the current directory): relative paths (a script, `--stage-in`, `--cwd`) are read there, it
is every job's submit directory, and `PWD` in the captured environment names it. A line
names a command or `--script` (stdin cannot hold a job's script when it holds the list),
and not `--batch`, `--controller` or `--json`; the command line gives `--batch` with
`--controller` and `--quiet` only.

What happens on a bad line, decided so that a script can tell what exists: every line is
checked before anything is sent (options, scripts, sizes, times); bad lines are reported
one message each, `xce: error: FILE:N: ...`, and nothing is submitted (exit 2). Then the jobs
go in file order; each job id is printed on its own line as its answer comes, so output line
k is the job of the k-th job line. When the controller refuses a job, the message names its
line, the later lines are not sent and the exit code is 1: the ids printed are exactly the
jobs that were made.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from xce.cli import common

# Options of the command line that go with --batch, and options no line may name.
_WITH_BATCH = {"batch", "controller", "quiet"}
_NOT_ON_A_LINE = {"batch": "--batch", "controller": "--controller", "as_json": "--json"}

# where (file and line), the submit body (`jobs._submit_body`), the files to upload
Job = tuple[str, dict[str, Any], list[tuple[Path, str]]]


def submit_batch(
    source: str, command: list[str] | None, controller: list[str] | None, quiet: bool
) -> None:
    """Check every line of `source` (a file, or `-` for stdin), then submit them in order
    over one connection, printing one job id per line (module docstring: the rules)."""
    from xce.cli import submitting

    given = submitting.explicit_options(sys.argv[1:]) or set()
    if command or given - _WITH_BATCH:
        common.fail(
            "--batch takes no command and no other options (they go on each line), "
            "only --controller and --quiet",
            2,
        )
    label, text, directory = _read(source)
    os.chdir(directory)
    os.environ["PWD"] = directory  # `cd DIR && xce job submit ...`, as the shell would
    jobs = _check(label, text)
    _send(label, jobs, controller, quiet)


def _read(source: str) -> tuple[str, str, str]:
    """The list's name in messages, its text, and the directory its jobs are submitted
    from (absolute, in the user's own spelling where $PWD gives it)."""
    from xce.cli.submitting import _submit_dir

    here = _submit_dir() or os.getcwd()
    if source == "-":
        return "stdin", sys.stdin.read(), here
    try:
        text = Path(source).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        common.fail(f"--batch {source}: {getattr(exc, 'strerror', None) or exc}", 2)
    return source, text, os.path.normpath(os.path.join(here, os.path.dirname(source)))


def _check(label: str, text: str) -> list[Job]:
    """Every job line as a body and its files to upload; a bad line is reported (all of
    them, one message each) and then nothing is submitted."""
    from xce.cli import fast
    from xce.cli.jobs import prepare, submit

    parser, converters = fast._parser(submit)
    jobs: list[Job] = []
    bad = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{label}:{number}"
        with common.about(f"{where}: "):
            try:
                body, staged = _one(line, parser, converters, prepare)
            except typer.Exit:
                bad += 1
                continue
        jobs.append((where, body, staged))
    if bad:
        common.fail(f"{bad} bad line(s) in {label}: nothing was submitted", 2)
    if not jobs:
        common.fail(f"--batch {label}: no jobs (every line is blank or a # comment)", 2)
    return jobs


def _one(
    line: str, parser: Any, converters: dict[str, Any], prepare: Any
) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """One line as `xce job submit` reads its arguments; `fail`s with the reason."""
    from xce.cli import fast
    from xce.cli.directives import strip_comment
    from xce.cli.submitting import explicit_options

    try:
        words = shlex.split(strip_comment(line))
    except ValueError as exc:
        common.fail(f"{exc} (check the quotes)", 2)
    try:
        values = vars(parser.parse_args(words))
    except fast._Fallback as exc:
        common.fail(str(exc), 2)
    for name, convert in converters.items():
        values[name] = convert(values[name])
    args = ["job", "submit", *words]
    named = explicit_options(args, parser) or set()
    for key, option in _NOT_ON_A_LINE.items():
        if key in named:
            common.fail(f"{option} is not allowed on a batch line", 2)
    if not values["command"] and values["script"] is None:
        common.fail("nothing to run: give a command or --script", 2)
    body, staged = prepare(values, args, parser)
    return body, staged


def _send(label: str, jobs: list[Job], controller: list[str] | None, quiet: bool) -> None:
    """Submit in order on one client; a job the controller refuses stops the batch with a
    message naming its line. Lines already answered are not sent again when the call is
    repeated (a token renewed after a 401)."""
    from xce.cli.jobs import _submit_with_uploads
    from xce.client.errors import ApiError

    made: list[str] = []

    def run(client: Any) -> None:
        for index in range(len(made), len(jobs)):
            where, body, staged = jobs[index]
            try:
                result = _submit_with_uploads(body, staged, client, quiet=quiet)
            except (ApiError, OSError) as exc:
                if isinstance(exc, ApiError) and exc.status == 401:
                    raise  # the token's, not the line's: renewed and tried again, or said
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                left = len(jobs) - index - 1
                with common.about(f"{where}: "):
                    common.fail(f"{message} ({left} later line(s) not submitted)", 1)
            with common.about(f"{where}: "):
                for warning in result.get("warnings", ()):
                    common.warn(warning)
            sys.stdout.write(f"{result['job_id']}\n")
            sys.stdout.flush()
            made.append(result["job_id"])

    common.call_light(run, controller)
