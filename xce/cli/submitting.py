"""What `xce job submit` sends: the script and its directives, options, the environment.

Kept apart from the command's option list (xce/cli/jobs.py) so the rules read in one place:
where the script comes from (a file argument that starts with `#!` or holds directives,
`--script`, or stdin like `sbatch` and `bsub < job.sh`), its default name (the file's, as
sbatch and bsub name it), how directives merge (the command line wins; lists add up), the
old spellings that still work for one release with a warning (`-i/--input` for
`--stage-in`, `-e NAME=VALUE` for `--env`), and the captured environment (`--export`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

from xce.cli import common
from xce.cli.common import fail

# The submit options a directive may set, with the command line's defaults. Which options the
# command line gave is read from the arguments themselves (`explicit_options`), so `-n 1`
# beats `#SBATCH -n 4`; without them (a caller that is not the command line) a value equal
# to its default is taken as "not given".
DEFAULTS: dict[str, Any] = {
    "queue": None,
    "name": "",
    "slots": 1,
    "memory": "0",
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
    "mem_per_cpu": "0",
    "exclusive": False,
    "account": None,
    "qos": None,
    "licenses": None,
}
# Options of which the command line gives one and a directive another that cannot go with
# it: a command-line `--mem` also overrides a directive's `--mem-per-cpu`, and the reverse.
_EXCLUSIVE_GROUPS = ({"memory", "mem_per_cpu"},)
# What is read of a file argument to tell a script from a command.
_HEAD_BYTES = 64 * 1024
_ENV_ITEM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def warn(text: str) -> None:
    common.warn(text)


def explicit_options(args: list[str], parser: Any = None) -> set[str] | None:
    """The submit options `args` (the command line after `xce`) name, by parameter name;
    None when `args` is not a `job submit` command line. `parser`: the fast path's parser
    of `submit`, when the caller has it (one per line of a batch would cost more than the
    job)."""
    words = [a for a in args if not a.startswith("-")]
    if words[:2] != ["job", "submit"]:
        return None
    if parser is None:
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
    after_dashes: bool | None = None,
) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """The request body (with `walltime` still as text) and the files to upload.
    `after_dashes`: the command came after `--` (None: read from sys.argv), which makes a
    plain text file without `#!` or directives a command rather than an error."""
    options = dict(given)
    if after_dashes is None:
        after_dashes = dashes_given(sys.argv[1:])
    text, source = _script_source(command, script, after_dashes)
    body: dict[str, Any] = {}
    if text is not None:
        body["script"] = text
        _apply_directives(text, options, lenient, explicit)
        if not options["name"] and source is not None:
            options["name"] = source.name[:128]  # sbatch and bsub name a job by its file
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
            "memory_mb": _megabytes(options["memory"], "--mem"),
            "env": _environment(options["export"], options["env"]),
            "outputs": list(options["stage_out"]),
            "hold": options["hold"],
            "resources": options["resources"],
        }
    )
    if mem_per_slot := _megabytes(options.get("mem_per_cpu") or 0, "--mem-per-cpu"):
        body["mem_per_slot_mb"] = mem_per_slot
    if options.get("exclusive"):
        body["exclusive"] = True
    if options.get("licenses"):
        body["licenses"] = gres_options(None, None, options["licenses"])["licenses"]
    body["submit_dir"] = _submit_dir()
    if options["cwd"] is not None:
        options["cwd"] = os.path.abspath(os.path.expanduser(options["cwd"]))
    for key in (
        "queue",
        "cwd",
        "account",
        "qos",
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


def _megabytes(value: int | str, option: str) -> int:
    """A memory size in MB: an int as it is, text such as `4G` or `512` (MB) read with the
    same rules as `#SBATCH --mem`; a bad one is a one-line usage error naming the option."""
    if isinstance(value, int):
        return value
    if value == "0":  # the options' default: no size, without loading the size rules
        return 0
    from xce.cli.directives import megabytes

    try:
        return megabytes(value)
    except ValueError as exc:
        fail(f"{option} {value}: {exc}", 2)
    return 0


def _submit_dir() -> str | None:
    """The directory the job is submitted from, which it starts in (as with sbatch and
    bsub) unless it gives --cwd. $PWD keeps the user's own spelling of a symlinked path
    (what `pwd` shows, what sbatch records) where it names the same directory."""
    try:
        here = os.getcwd()
    except OSError:  # removed under the shell: the job starts in its own directory
        return None
    shown = os.environ.get("PWD", "")
    if shown.startswith("/"):
        try:
            if os.path.samefile(shown, here):
                return shown
        except OSError:
            pass
    return here


def dashes_given(args: list[str]) -> bool:
    """Whether `args` (the command line after `xce`) is `job submit ... -- CMD`."""
    words = [a for a in args if not a.startswith("-")]
    if words[:2] != ["job", "submit"]:
        return False
    return "--" in args[args.index("submit") + 1 :]


def _script_source(
    command: list[str] | None, script: Path | None, after_dashes: bool = False
) -> tuple[str | None, Path | None]:
    """The script's text and the file it came from (None for stdin), or (None, None) when
    the job is a command. One file argument is the script when it starts with `#!` or
    holds directives (`bsub < job.sh` needs no `#!`), as sbatch reads it; a program
    (binary) is a command, as `bsub ./a.out` runs it; a text file with neither is refused
    rather than run by its name (it would fail on the host), unless it comes after `--`."""
    if script is not None:
        if command:
            fail("give either a command or --script, not both")
        return _read(script), script
    if command:
        if len(command) != 1:
            return None, None
        path = Path(command[0])
        kind = _file_kind(path)
        if kind == "script":
            return _read(path), path
        if kind == "text" and not after_dashes:
            fail(
                f"{path} has no #! line and no #SBATCH/#BSUB/#XCE directives: give a "
                f"command (xce job submit -- {_shown(path)}) or add a #! line"
            )
        return None, None
    if not sys.stdin.isatty():
        return sys.stdin.read(), None
    fail("nothing to run: give a command, a script file, or a script on stdin")
    return None, None


def _file_kind(path: Path) -> Literal["script", "program", "text", "none"]:
    """What a command's single word names: a script (`#!` or directives), a program (a
    binary), another text file, or no local file (a command such as `hostname`)."""
    try:
        if not path.is_file():  # before opening: a FIFO would block the open
            return "none"
        with path.open("rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return "none"
    if head.startswith(b"#!"):
        return "script"
    if b"\0" in head:
        return "program"
    from xce.cli.directives import directive_lines

    return "script" if directive_lines(head.decode(errors="replace")) else "text"


def _shown(path: Path) -> str:
    """How to name `path` as a command: `./job.txt`, not `job.txt` (looked up in PATH)."""
    text = str(path)
    return text if "/" in text else f"./{text}"


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
        elif not any(_given(k, options, explicit) for k in _group_of(key)):
            options[key] = value


def _group_of(key: str) -> set[str]:
    """`key` and the options that cannot go with it (`_EXCLUSIVE_GROUPS`)."""
    return next((group for group in _EXCLUSIVE_GROUPS if key in group), {key})


def _given(key: str, options: dict[str, Any], explicit: set[str] | None) -> bool:
    """Whether the command line gave `key`: named in `explicit` (its own arguments), or
    without them, a value other than the default."""
    if explicit is not None:
        return key in explicit
    return bool(options[key] != DEFAULTS[key])


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
    found = {k: v for k, v in mine.items() if v != plain[k] and k in DEFAULTS}
    for key in ("memory", "mem_per_cpu"):  # sizes in MB, as the other directives give them
        if isinstance(found.get(key), str):
            from xce.cli.directives import megabytes

            found[key] = megabytes(found[key])
    return found


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
