"""Submitting for sbatch, bsub and qsub: exactly what `xce job submit` does with a script.

Why this way: an sbatch option on the command line means what the same `#SBATCH` line
means, so the options are not translated a second time here. sbatch's and bsub's options
are written as directive lines (`#SBATCH`/`#BSUB`, one per option) after the script's own
directives, an option on the command line taking the place of the script's, and the whole
block is read by the directive translator (xce/cli/directives/); qsub's options and `#PBS`
lines, which that translator does not read, by xce/cli/compat/pbs.py. What comes out are
`xce job submit`'s parameters, given to `submitting.build` as its command line's, and the
body goes through the same steps as `xce job submit`: the script read from the file or
stdin, the environment captured, staged files uploaded.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xce.cli.compat.base import Usage, call, warn
from xce.cli.compat.formats import DOC

Option = list[str]  # one option as its words: ["-n", "4"], ["--time=10"], ["-H"]


def scan(args: list[str], takes_value: Callable[[str], bool]) -> tuple[list[Option], list[str]]:
    """Split a submit command line into its options (each with its value) and what
    follows them: the script or command and its arguments (after `--` too)."""
    options: list[Option] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return options, args[i + 1 :]
        if not word.startswith("-") or word == "-":
            return options, args[i:]
        i += 1
        if takes_value(word) and i < len(args):
            options.append([word, args[i]])
            i += 1
        else:
            options.append([word])
    return options, []


_LINE = re.compile(r"^line (\d+):")


def translate(
    tool: str,
    prefix: str,
    options: list[Option],
    script: str | None = None,
    same: Callable[[str], str] = lambda name: name,
    takes_value: Callable[[str], bool] = lambda word: True,
) -> dict[str, Any]:
    """`xce job submit` parameters for the command line's `options` and the script's
    directives, read together as one directive block: the script's lines, then one
    `prefix` line per option (so an error names the option). An option given on the
    command line takes the place of the script's (`same` names an option the same way
    whatever its spelling: `-n`, `--ntasks`), as it does for the real tool: `sbatch -c 2`
    with `#SBATCH -n 4` asks for 8 slots. The script's warnings are left to
    `submitting.build`, which reads the script again (and prints them with its line
    numbers); list-valued parameters (`--env`) too, which it adds up."""
    from xce.cli import submitting
    from xce.cli.directives import DirectiveError, directive_lines, parse, strip_comment

    given = {same(option[0]) for option in options}
    block: list[str] = []
    origin: list[int | Option] = []  # per block line: the script's line number, or the option
    for number, kind, rest in directive_lines(script) if script else []:
        text = strip_comment(rest)
        if kind == prefix:
            try:
                kept, extra = scan(shlex.split(text), takes_value)
            except ValueError:
                kept, extra = [], []  # the parse below reports the quotes
            else:
                if not extra:
                    kept = [o for o in kept if same(o[0]) not in given]
                    text = shlex.join([word for o in kept for word in o])
        if text:
            block.append(f"{kind} {text}")
            origin.append(number)
    for option in options:
        block.append(f"{prefix} {shlex.join(option)}")
        origin.append(option)
    try:
        found = parse("".join(f"{line}\n" for line in block), submitting._parse_xce_line)
    except DirectiveError as exc:
        where = origin[exc.line - 1] if 1 <= exc.line <= len(origin) else None
        problem = _problem(str(exc))
        if isinstance(where, int):
            quoted = str(exc).partition(": ")[2]
            raise Usage(f"script directive line {where}: {quoted}") from None
        if where is None:
            raise Usage(problem) from None
        if problem.startswith("unknown or unsupported"):
            name = where[0].split("=")[0]
            raise Usage(f"option {name} is not covered by XCE's {tool} (see {DOC})") from None
        raise Usage(f"{' '.join(where)}: {problem}") from None
    for message in found.warnings:
        m = _LINE.match(message)
        where = origin[int(m.group(1)) - 1] if m and int(m.group(1)) <= len(origin) else None
        if isinstance(where, list):
            warn(tool, f"{' '.join(where)}: {_problem(message)}")
    return {
        key: value
        for key, value in found.options.items()
        if not isinstance(submitting.DEFAULTS.get(key), list)
    }


def _problem(message: str) -> str:
    """The translator's words after the quoted line: `line 2: '#SBATCH -x': PROBLEM`."""
    _, sep, rest = message.partition("': ")
    return rest if sep else message


def submit(
    options: dict[str, Any],
    command: list[str] | None = None,
    script: Path | None = None,
    final: bool = False,
) -> dict[str, Any]:
    """Submit as `xce job submit` would with these parameters given on its command line;
    the controller's answer (`job_id`, `queue`, maybe `warnings`). `final`: `options`
    already hold what the script's directives ask (`translate`), so none of them is
    taken again (lists excepted, which `build` adds)."""
    from xce.cli import jobs, submitting

    unknown = set(options) - set(submitting.DEFAULTS)
    if unknown:  # a translation this version of `xce job submit` does not take
        raise Usage(f"{', '.join(sorted(unknown))}: not supported by this XCE")
    given = {**submitting.DEFAULTS, **options}
    explicit = set(submitting.DEFAULTS) if final else set(options)
    draft, staged = submitting.build(command, script, [], given, False, explicit)
    body = jobs._submit_body(draft, None, None, None)
    result: dict[str, Any] = call(functools.partial(jobs._submit_with_uploads, body, staged))
    return result


def script_text(command: list[str] | None, script: Path | None) -> str | None:
    """The text whose directives `submitting.build` will read: the script file, a lone
    file argument (`bsub job.sh`), or stdin, which is read here and put back."""
    import io
    import sys

    if script is None and command and len(command) == 1:
        script = Path(command[0])
    if script is not None:
        try:
            return script.read_text() if script.is_file() else None
        except (OSError, UnicodeDecodeError):
            return None
    if command or sys.stdin.isatty():
        return None
    text = sys.stdin.read()
    sys.stdin = io.StringIO(text)  # `submitting.build` reads the script from stdin
    return text


def read_script(tool: str, path: str, need_shebang: bool) -> Path:
    """The script file named on the command line, checked as the tool checks it."""
    script = Path(path)
    try:
        with script.open("rb") as f:
            head = f.read(2)
    except OSError:
        raise Usage(f"Unable to open file {path}") from None
    if need_shebang and head != b"#!":
        raise Usage(
            "This does not look like a batch script.  The first line must start with #! "
            "followed by the path to an interpreter."
        )
    return script


def wait_for(job_id: str) -> int:
    """sbatch -W, bsub -K: until the job ends; its exit code (1 for an array, or a job
    that ended without one), as those return."""
    import time

    def run(client: Any) -> dict[str, Any]:
        pause = 0.5
        while True:
            job: dict[str, Any] = client.job(job_id)
            if job["state"] in ("DONE", "EXIT"):
                return job
            time.sleep(pause)
            pause = min(pause * 1.5, 5.0)

    job = call(run)
    if job["state"] == "DONE":
        return 0
    code = job.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1
