"""What `xce job submit` sends: the script and its directives, options, the environment.

Kept apart from the command's option list (xce/cli/jobs.py) so the rules read in one place:
where the script comes from (a file argument starting with `#!`, `--script`, or stdin like
`sbatch` and `bsub < job.sh`), how directives merge (the command line wins; lists add up),
the old spellings that still work for one release with a warning (`-i/--input` for
`--stage-in`, `-e NAME=VALUE` for `--env`), and the captured environment (`--export`).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import typer

from xce.cli.common import fail

# The submit options a directive may set, with the command line's defaults. Which options the
# command line gave is read from the arguments themselves (`explicit_options`), so `-n 1`
# beats `#SBATCH -n 4`; without them (a caller that is not the command line) a value equal
# to its default is taken as "not given".
DEFAULTS: dict[str, Any] = {
    "queue": None,
    "name": "",
    "slots": 1,
    "memory": 0,
    "walltime": None,
    "stdout": None,
    "stderr": None,
    "export": None,
    "cwd": None,
    "array": None,
    "dependency": None,
    "hold": False,
    "resources": "",
    "user": None,
    "env": [],
    "stage_in": [],
    "stage_out": [],
    "gpus": None,
    "reservation": None,
    "begin": None,
    "mem_per_cpu": 0,
    "exclusive": False,
}
_ENV_ITEM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def warn(text: str) -> None:
    typer.echo(f"xce: warning: {text}", err=True)


def explicit_options(args: list[str]) -> set[str] | None:
    """The submit options `args` (the command line after `xce`) name, by parameter name;
    None when `args` is not a `job submit` command line."""
    words = [a for a in args if not a.startswith("-")]
    if words[:2] != ["job", "submit"]:
        return None
    from xce.cli import fast
    from xce.cli.jobs import submit

    try:
        parser, _ = fast._parser(submit)
    except fast._Fallback:
        return None
    flags = {s: a.dest for a in parser._actions for s in a.option_strings}
    found: set[str] = set()
    for arg in args[args.index("submit") + 1 :]:
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            found.add(flags[name])
        elif not arg.startswith("--") and arg[:2] in flags:  # -n4: a short option's value
            found.add(flags[arg[:2]])
    return found


def build(
    command: list[str] | None,
    script: Path | None,
    inputs: list[str],
    given: dict[str, Any],
    lenient: bool,
    explicit: set[str] | None = None,
) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """The request body (with `walltime` still as text) and the files to upload."""
    options = dict(given)
    text = _script_text(command, script)
    body: dict[str, Any] = {}
    if text is not None:
        body["script"] = text
        _apply_directives(text, options, lenient, explicit)
    else:
        assert command
        body["command"] = command[0] if len(command) == 1 else shlex.join(command)
    if inputs:
        warn(
            "-i/--input is now spelled --stage-in (bsub and sbatch use -i for the job's "
            "stdin); the old spelling goes away in the next release"
        )
        options["stage_in"] = [*options["stage_in"], *inputs]
    stderr = options["stderr"]
    if stderr is not None and _ENV_ITEM.match(stderr):
        warn(
            f"-e {stderr}: -e now names the job's stderr file (as in bsub/sbatch); taken "
            "as --env this once, spell it --env"
        )
        options["env"] = [*options["env"], stderr]
        options["stderr"] = None
    body.update(
        {
            "name": options["name"],
            "slots": options["slots"],
            "memory_mb": options["memory"],
            "env": _environment(options["export"], options["env"]),
            "outputs": list(options["stage_out"]),
            "hold": options["hold"],
            "resources": options["resources"],
            "submit_host": socket.gethostname(),
        }
    )
    if options.get("mem_per_cpu"):
        body["mem_per_slot_mb"] = options["mem_per_cpu"]
    if options.get("exclusive"):
        body["exclusive"] = True
    for key in (
        "queue",
        "cwd",
        "array",
        "dependency",
        "user",
        "stdout",
        "stderr",
        "walltime",
        "gpus",
        "reservation",
        "begin",
    ):
        if options[key] is not None:
            body[key] = options[key]
    return body, _staged(options["stage_in"])


def _script_text(command: list[str] | None, script: Path | None) -> str | None:
    if script is not None:
        if command:
            fail("give either a command or --script, not both")
        return _read(script)
    if command:
        if len(command) == 1 and _is_script(Path(command[0])):
            return _read(Path(command[0]))
        return None
    if not sys.stdin.isatty():
        return sys.stdin.read()
    fail("nothing to run: give a command, a script file, or a script on stdin")
    return None


def _is_script(path: Path) -> bool:
    """A local file that starts with `#!`: submitted as the script, as sbatch does."""
    try:
        with path.open("rb") as f:
            return path.is_file() and f.read(2) == b"#!"
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read script {path}: {getattr(exc, 'strerror', None) or exc}")
    return ""


def _apply_directives(
    text: str, options: dict[str, Any], lenient: bool, explicit: set[str] | None = None
) -> None:
    from xce.cli.directives import DirectiveError, parse

    try:
        found = parse(text, _parse_xce_line, lenient)
    except DirectiveError as exc:
        fail(f"script directive {exc}")
    for message in found.warnings:
        warn(f"script directive {message}")
    for key, value in found.options.items():
        if key not in DEFAULTS:
            fail(f"script directive: #XCE option for {key} is not allowed in a script")
        if isinstance(DEFAULTS[key], list):
            options[key] = [*value, *options[key]]
        elif (key not in explicit) if explicit is not None else options[key] == DEFAULTS[key]:
            options[key] = value


def _parse_xce_line(tokens: list[str]) -> dict[str, Any]:
    """An `#XCE` line through the same parser as the command line (xce/cli/fast.py)."""
    from xce.cli import fast
    from xce.cli.jobs import submit

    parser, converters = fast._parser(submit)

    def values(args: list[str]) -> dict[str, Any]:
        try:
            out = vars(parser.parse_args(args))
        except fast._Fallback as exc:
            raise ValueError(str(exc)) from None
        for name, convert in converters.items():
            out[name] = convert(out[name])
        return out

    mine, plain = values(tokens), values([])
    if mine.get("command"):
        raise ValueError("an #XCE line holds options only")
    return {k: v for k, v in mine.items() if v != plain[k] and k in DEFAULTS}


def _environment(export: str | None, pairs: list[str]) -> dict[str, str]:
    from xce.cli.environment import check_size, export_environment

    try:
        env = export_environment(export, os.environ)
    except ValueError as exc:
        fail(str(exc))
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--env {item!r}: use NAME=VALUE")
        env[key] = value
    try:
        check_size(env)
    except ValueError as exc:
        fail(str(exc))
    return env


def _staged(items: list[str]) -> list[tuple[Path, str]]:
    staged = []
    for item in items:
        local, sep, remote = item.partition(":")
        path = Path(local)
        if not path.is_file():
            fail(f"--stage-in {local}: no such file")
        staged.append((path, remote if sep else path.name))
    return staged


def gres_options(
    gpus: int | None, gres_text: str | None, licenses: str | None
) -> dict[str, dict[str, int]]:
    """`--gpus`, `--gres` and `--license` as the API's "gres" and "licenses" (a bad one is
    a one-line usage error naming it)."""
    from xce.core.errors import InvalidRequest
    from xce.core.gres import add_count, parse_counts

    out: dict[str, dict[str, int]] = {}
    try:
        devices = parse_counts(gres_text or "", "--gres")
        if gpus is not None:
            add_count(devices, "gpu", gpus, "--gpus/--gres")
        if devices:
            out["gres"] = devices
        if licenses:
            out["licenses"] = parse_counts(licenses, "--license")
    except InvalidRequest as exc:
        fail(exc.message, 2)
    return out
